use serde::{Deserialize, Serialize};

use crate::render::inside;
use crate::{Background, Clip, Color, Motion, Shape};

/// What a clip shows, as far as classical analysis can tell. `None` means "no object found"
/// (or no decisive motion), which scores as wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Analysis {
    /// The flat background, nearest of the vocabulary's to the frame borders.
    pub background: Background,
    /// The object's colour, from its solid core.
    pub color: Option<Color>,
    /// The object's shape, from its outline.
    pub shape: Option<Shape>,
    /// What the object did, from its centroid and area tracks.
    pub motion: Option<Motion>,
}

/// A pixel belongs to the object when its colour is this far (Euclidean RGB) from the background.
const MASK_DISTANCE: f32 = 70.0;
/// Pixels this far from the background are "solid" object, used for the colour estimate.
const CORE_DISTANCE: f32 = 110.0;
/// Frames with fewer object pixels are ignored (noise specks).
const MIN_AREA: usize = 12;

fn dist(a: [f32; 3], b: [f32; 3]) -> f32 {
    ((a[0] - b[0]).powi(2) + (a[1] - b[1]).powi(2) + (a[2] - b[2]).powi(2)).sqrt()
}

fn px(frame: &[u8], i: usize) -> [f32; 3] {
    [frame[3 * i] as f32, frame[3 * i + 1] as f32, frame[3 * i + 2] as f32]
}

fn nearest<T: Copy>(all: &[T], rgb: impl Fn(T) -> [u8; 3], c: [f32; 3]) -> T {
    *all.iter()
        .min_by(|a, b| dist(rgb(**a).map(f32::from), c).total_cmp(&dist(rgb(**b).map(f32::from), c)))
        .expect("non-empty")
}

struct FrameMask {
    pixels: Vec<bool>,
    area: usize,
    centroid: (f32, f32),
    bbox: (usize, usize, usize, usize),
}

fn mask(frame: &[u8], w: usize, h: usize, bg: [f32; 3]) -> FrameMask {
    let mut pixels = vec![false; w * h];
    let (mut area, mut sx, mut sy) = (0usize, 0f32, 0f32);
    let mut bbox = (usize::MAX, 0, usize::MAX, 0);
    for y in 0..h {
        for x in 0..w {
            let i = y * w + x;
            if dist(px(frame, i), bg) > MASK_DISTANCE {
                pixels[i] = true;
                area += 1;
                sx += x as f32 + 0.5;
                sy += y as f32 + 0.5;
                bbox = (bbox.0.min(x), bbox.1.max(x), bbox.2.min(y), bbox.3.max(y));
            }
        }
    }
    let centroid = if area > 0 { (sx / area as f32, sy / area as f32) } else { (0.0, 0.0) };
    FrameMask { pixels, area, centroid, bbox }
}

/// Extent of a shape in object coordinates: (u_min, u_max, v_min, v_max).
type Extent = (f32, f32, f32, f32);

fn extent(shape: Shape) -> Extent {
    let n = 200;
    let mut e = (f32::MAX, f32::MIN, f32::MAX, f32::MIN);
    for j in 0..=n {
        for i in 0..=n {
            let (u, v) = (-1.0 + 2.0 * i as f32 / n as f32, -1.0 + 2.0 * j as f32 / n as f32);
            if inside(shape, u, v) {
                e = (e.0.min(u), e.1.max(u), e.2.min(v), e.3.max(v));
            }
        }
    }
    e
}

/// IoU of the mask with `shape` placed to fill the mask's bounding box.
fn template_iou(m: &FrameMask, w: usize, h: usize, shape: Shape, ext: Extent) -> f32 {
    let (x0, x1, y0, y1) = (m.bbox.0 as f32, m.bbox.1 as f32 + 1.0, m.bbox.2 as f32, m.bbox.3 as f32 + 1.0);
    let r = 0.5 * ((x1 - x0) / (ext.1 - ext.0) + (y1 - y0) / (ext.3 - ext.2));
    let cx = 0.5 * (x0 + x1) - 0.5 * (ext.0 + ext.1) * r;
    let cy = 0.5 * (y0 + y1) - 0.5 * (ext.2 + ext.3) * r;
    let (mut inter, mut union) = (0usize, 0usize);
    // The template fills the mask's box, and the mask is empty outside it: count inside only.
    for y in m.bbox.2.saturating_sub(1)..(m.bbox.3 + 2).min(h) {
        for x in m.bbox.0.saturating_sub(1)..(m.bbox.1 + 2).min(w) {
            let t = inside(shape, (x as f32 + 0.5 - cx) / r, (y as f32 + 0.5 - cy) / r);
            let m = m.pixels[y * w + x];
            inter += (t && m) as usize;
            union += (t || m) as usize;
        }
    }
    if union == 0 {
        0.0
    } else {
        inter as f32 / union as f32
    }
}

/// Reads background, colour, shape and motion back from a clip.
pub fn analyze(clip: &Clip) -> Analysis {
    let (w, h) = (clip.width, clip.height);
    // Background: mean of the border pixels over all frames.
    let mut acc = [0f32; 3];
    let mut n = 0f32;
    for f in 0..clip.frames {
        let fr = clip.frame(f);
        for y in 0..h {
            for x in 0..w {
                if x == 0 || y == 0 || x == w - 1 || y == h - 1 {
                    let p = px(fr, y * w + x);
                    acc = [acc[0] + p[0], acc[1] + p[1], acc[2] + p[2]];
                    n += 1.0;
                }
            }
        }
    }
    let bg = acc.map(|a| a / n);
    let background = nearest(Background::ALL, Background::rgb, bg);

    let masks: Vec<(usize, FrameMask)> =
        (0..clip.frames).map(|f| (f, mask(clip.frame(f), w, h, bg))).filter(|(_, m)| m.area >= MIN_AREA).collect();
    if masks.len() < 2 {
        return Analysis { background, color: None, shape: None, motion: None };
    }

    // Colour: mean of solid object pixels (fall back to the whole mask for tiny objects).
    let mut sum = [0f32; 3];
    let mut cnt = 0f32;
    for threshold in [CORE_DISTANCE, MASK_DISTANCE] {
        for (f, _) in &masks {
            let fr = clip.frame(*f);
            for i in 0..w * h {
                let p = px(fr, i);
                if dist(p, bg) > threshold {
                    sum = [sum[0] + p[0], sum[1] + p[1], sum[2] + p[2]];
                    cnt += 1.0;
                }
            }
        }
        if cnt > 0.0 {
            break;
        }
    }
    let color = Some(nearest(Color::ALL, Color::rgb, sum.map(|s| s / cnt)));

    // Shape: template IoU summed over frames.
    static EXTENTS: std::sync::OnceLock<Vec<(Shape, Extent)>> = std::sync::OnceLock::new();
    let extents = EXTENTS.get_or_init(|| Shape::ALL.iter().map(|&s| (s, extent(s))).collect());
    let shape = extents
        .iter()
        .map(|&(s, e)| (s, masks.iter().map(|(_, m)| template_iou(m, w, h, s, e)).sum::<f32>()))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(s, _)| s);

    // Motion: least-squares slopes of centroid and log-area over time.
    let ts: Vec<f32> = masks.iter().map(|(f, _)| *f as f32 / (clip.frames.max(2) - 1) as f32).collect();
    let slope = |ys: &[f32]| {
        let tm = ts.iter().sum::<f32>() / ts.len() as f32;
        let ym = ys.iter().sum::<f32>() / ys.len() as f32;
        let num: f32 = ts.iter().zip(ys).map(|(t, y)| (t - tm) * (y - ym)).sum();
        let den: f32 = ts.iter().map(|t| (t - tm).powi(2)).sum();
        if den > 0.0 {
            num / den
        } else {
            0.0
        }
    };
    let dx = slope(&masks.iter().map(|(_, m)| m.centroid.0).collect::<Vec<_>>()) / w as f32;
    let dy = slope(&masks.iter().map(|(_, m)| m.centroid.1).collect::<Vec<_>>()) / h as f32;
    let grow = slope(&masks.iter().map(|(_, m)| (m.area as f32).ln()).collect::<Vec<_>>());
    // Thresholds: a move crosses ~40% of the frame; a grow multiplies the area ~8x (ln ≈ 2).
    let motion = if grow.abs() > 0.8 && grow.abs() > 4.0 * dx.abs().max(dy.abs()) {
        Some(if grow > 0.0 { Motion::Growing } else { Motion::Shrinking })
    } else if dx.abs().max(dy.abs()) > 0.1 {
        Some(if dx.abs() >= dy.abs() {
            if dx < 0.0 {
                Motion::Left
            } else {
                Motion::Right
            }
        } else if dy < 0.0 {
            Motion::Up
        } else {
            Motion::Down
        })
    } else {
        None
    };
    Analysis { background, color, shape, motion }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{render, Scene, Variation};

    #[test]
    fn ground_truth_clips_read_back_correctly() {
        let mut wrong = Vec::new();
        let scenes = Scene::all();
        for (i, s) in scenes.iter().enumerate() {
            let clip = render(s, &Variation::sample(i as u64), 17, 64);
            let a = analyze(&clip);
            let want = Analysis {
                background: s.background,
                color: Some(s.color),
                shape: Some(s.shape),
                motion: Some(s.motion),
            };
            if a != want {
                wrong.push(format!("{}: got {a:?}", s.prompt()));
            }
        }
        // Every attribute of every one of the 540 scenes (random variations) is read back.
        assert!(wrong.is_empty(), "{} of {} wrong:\n{}", wrong.len(), scenes.len(), wrong.join("\n"));
    }

    #[test]
    fn noise_scores_near_chance() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
        let scenes = Scene::all();
        let n = 60;
        let mut hits = [0usize; 4];
        for _ in 0..n {
            let target = scenes[rng.random_range(0..scenes.len())];
            let rgb: Vec<u8> = (0..17 * 64 * 64 * 3).map(|_| rng.random()).collect();
            let a = analyze(&Clip { frames: 17, height: 64, width: 64, rgb });
            hits[0] += (a.background == target.background) as usize;
            hits[1] += (a.color == Some(target.color)) as usize;
            hits[2] += (a.shape == Some(target.shape)) as usize;
            hits[3] += (a.motion == Some(target.motion)) as usize;
        }
        // Chance: 1/3, 1/6, 1/5, 1/6. Allow sampling noise (n = 60) but nothing like skill.
        let chance = [1.0 / 3.0, 1.0 / 6.0, 1.0 / 5.0, 1.0 / 6.0];
        for (k, (&h, c)) in hits.iter().zip(chance).enumerate() {
            let acc = h as f64 / n as f64;
            assert!(acc <= c + 0.2, "attribute {k}: accuracy {acc:.2} on noise vs chance {c:.2}");
        }
    }
}
