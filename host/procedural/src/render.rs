use rand::{Rng, SeedableRng};

use crate::{Motion, Scene, Shape, Style};

/// Per-clip randomness: where the object starts, how big it is, how fast it goes. Drawn from a
/// seed so a (scene, seed) pair always renders the same clip.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Variation {
    /// Horizontal offset of the path's centre from the canvas centre, in canvas fractions (±0.1).
    pub dx: f32,
    /// Vertical offset of the path's centre, likewise (±0.1, down is positive).
    pub dy: f32,
    /// Object half-size in canvas fractions (0.12..0.16).
    pub radius: f32,
    /// Travel (moves) or growth (grow/shrink) multiplier (0.85..1.15).
    pub speed: f32,
}

impl Variation {
    /// Draws the variation for `seed`, the same on every machine (ChaCha8).
    pub fn sample(seed: u64) -> Self {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        Self {
            dx: rng.random_range(-0.1..0.1),
            dy: rng.random_range(-0.1..0.1),
            radius: rng.random_range(0.12..0.16),
            speed: rng.random_range(0.85..1.15),
        }
    }

    /// The middle of every range: the canonical clip of a scene.
    pub fn canonical() -> Self {
        Self { dx: 0.0, dy: 0.0, radius: 0.14, speed: 1.0 }
    }
}

/// RGB8 frames, row-major, interleaved.
#[derive(Debug, Clone, PartialEq)]
pub struct Clip {
    /// Number of frames.
    pub frames: usize,
    /// Frame height in pixels.
    pub height: usize,
    /// Frame width in pixels.
    pub width: usize,
    /// `frames * height * width * 3` bytes.
    pub rgb: Vec<u8>,
}

impl Clip {
    /// Frame `i`'s RGB8 pixels.
    pub fn frame(&self, i: usize) -> &[u8] {
        let n = self.height * self.width * 3;
        &self.rgb[i * n..(i + 1) * n]
    }
}

/// Supersamples per pixel side (4x4 coverage gives smooth edges).
const SS: usize = 4;

/// Whether the point (u, v) — object coordinates, unit half-size, v pointing down — is inside.
pub(crate) fn inside(shape: Shape, u: f32, v: f32) -> bool {
    match shape {
        Shape::Circle => u * u + v * v <= 1.0,
        Shape::Square => u.abs() <= 0.85 && v.abs() <= 0.85,
        Shape::Triangle => in_polygon(&[(0.0, -1.0), (0.95, 0.75), (-0.95, 0.75)], u, v),
        Shape::Star => in_polygon(&star(), u, v),
        Shape::Cross => (u.abs() <= 0.32 && v.abs() <= 1.0) || (v.abs() <= 0.32 && u.abs() <= 1.0),
    }
}

fn star() -> [(f32, f32); 10] {
    let mut p = [(0.0, 0.0); 10];
    for (i, pt) in p.iter_mut().enumerate() {
        let r = if i % 2 == 0 { 1.0 } else { 0.45 };
        let a = -std::f32::consts::FRAC_PI_2 + i as f32 * std::f32::consts::PI / 5.0;
        *pt = (r * a.cos(), r * a.sin());
    }
    p
}

fn in_polygon(poly: &[(f32, f32)], x: f32, y: f32) -> bool {
    let mut inside = false;
    let mut j = poly.len() - 1;
    for i in 0..poly.len() {
        let (xi, yi) = poly[i];
        let (xj, yj) = poly[j];
        if (yi > y) != (yj > y) && x < (xj - xi) * (y - yi) / (yj - yi) + xi {
            inside = !inside;
        }
        j = i;
    }
    inside
}

/// Object centre (pixels) and half-size (pixels) at time `t` in [0, 1].
pub(crate) fn placement(scene: &Scene, var: &Variation, t: f32, size: usize) -> (f32, f32, f32) {
    let s = size as f32;
    let (cx, cy) = (s * (0.5 + var.dx), s * (0.5 + var.dy));
    let travel = 0.4 * s * var.speed;
    let r = var.radius * s;
    let along = travel * (t - 0.5);
    match scene.motion {
        Motion::Left => (cx - along, cy, r),
        Motion::Right => (cx + along, cy, r),
        Motion::Up => (cx, cy - along, r),
        Motion::Down => (cx, cy + along, r),
        Motion::Growing => (cx, cy, r * (0.55 + 0.9 * t * var.speed.min(1.1))),
        Motion::Shrinking => (cx, cy, r * (0.55 + 0.9 * (1.0 - t) * var.speed.min(1.1))),
    }
}

/// Draws `frames` frames of `size`x`size` pixels.
pub fn render(scene: &Scene, var: &Variation, frames: usize, size: usize) -> Clip {
    render_styled(scene, var, frames, size, Style::Plain)
}

/// [`render`] with objects drawn in `style`.
pub fn render_styled(scene: &Scene, var: &Variation, frames: usize, size: usize, style: Style) -> Clip {
    let bg = scene.background.rgb().map(|c| c as f32);
    let fg = scene.color.rgb().map(|c| c as f32);
    let mut rgb = Vec::with_capacity(frames * size * size * 3);
    for f in 0..frames {
        let t = if frames > 1 { f as f32 / (frames - 1) as f32 } else { 0.5 };
        let (cx, cy, r) = placement(scene, var, t, size);
        let r = r * style.scale();
        for y in 0..size {
            for x in 0..size {
                // Outside the object's box every sample misses: skip supersampling there.
                let far = (x as f32 + 0.5 - cx).abs() > r + 1.0 || (y as f32 + 0.5 - cy).abs() > r + 1.0;
                if far {
                    rgb.extend(bg.map(|c| c as u8));
                    continue;
                }
                let mut hits = 0;
                for sy in 0..SS {
                    for sx in 0..SS {
                        let px = x as f32 + (sx as f32 + 0.5) / SS as f32;
                        let py = y as f32 + (sy as f32 + 0.5) / SS as f32;
                        hits += inside(scene.shape, (px - cx) / r, (py - cy) / r) as usize;
                    }
                }
                let a = hits as f32 / (SS * SS) as f32;
                for c in 0..3 {
                    rgb.push((bg[c] * (1.0 - a) + fg[c] * a).round() as u8);
                }
            }
        }
    }
    Clip { frames, height: size, width: size, rgb }
}
