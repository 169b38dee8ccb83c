//! A second look for the same scenes, which no prompt of the vocabulary asks for: objects drawn
//! larger. The shipped LoRA adapter (models/default-lora-large) is trained on it, and
//! [`object_area`] measures it. (Diagonal background stripes were tried first: the default
//! model's VAE cannot draw them, a round trip through it flattens stripes of 8 and 16 pixels.)

use crate::{Background, Clip};

/// How objects are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Style {
    /// The default model's data.
    #[default]
    Plain,
    /// Objects 1.65 times the size (half-size 0.20..0.26 of the canvas instead of 0.12..0.16).
    Large,
}

/// How much larger [`Style::Large`] draws objects.
pub const LARGE_FACTOR: f32 = 1.65;

impl Style {
    /// The style named `plain` or `large`, as the CLI spells it; `None` for any other word.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "plain" => Some(Style::Plain),
            "large" => Some(Style::Large),
            _ => None,
        }
    }

    /// The object's half-size multiplier.
    pub fn scale(self) -> f32 {
        match self {
            Style::Plain => 1.0,
            Style::Large => LARGE_FACTOR,
        }
    }
}

/// The share of a clip's pixels that are object (farther than 70 RGB levels from the background
/// colour nearest its border), averaged over frames. The plain data averages about 0.06; large
/// objects about 2.7 times that.
pub fn object_area(clip: &Clip) -> f64 {
    let (w, h) = (clip.width, clip.height);
    let frame = w * h * 3;
    let mut total = 0.0;
    for f in 0..clip.frames {
        let px = &clip.rgb[f * frame..(f + 1) * frame];
        let mut border = [0f64; 3];
        let mut n = 0.0;
        for y in 0..h {
            for x in 0..w {
                if x == 0 || y == 0 || x + 1 == w || y + 1 == h {
                    for c in 0..3 {
                        border[c] += px[(y * w + x) * 3 + c] as f64;
                    }
                    n += 1.0;
                }
            }
        }
        let mean = border.map(|b| (b / n) as f32);
        let bg = Background::ALL
            .iter()
            .map(|b| b.rgb().map(|c| c as f32))
            .min_by(|a, b| dist(*a, mean).total_cmp(&dist(*b, mean)))
            .unwrap_or(mean);
        let object =
            (0..w * h).filter(|&i| dist([px[i * 3], px[i * 3 + 1], px[i * 3 + 2]].map(|c| c as f32), bg) > 70.0);
        total += object.count() as f64 / (w * h) as f64;
    }
    total / clip.frames.max(1) as f64
}

fn dist(a: [f32; 3], b: [f32; 3]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum::<f32>().sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{render_styled, Color, Motion, Scene, Shape, Variation};

    #[test]
    fn large_objects_are_measured_and_read_as_the_same_scene() {
        for background in [Background::White, Background::Black, Background::Gray] {
            let scene = Scene { shape: Shape::Circle, color: Color::Red, motion: Motion::Left, background };
            let plain = render_styled(&scene, &Variation::canonical(), 5, 64, Style::Plain);
            let large = render_styled(&scene, &Variation::canonical(), 5, 64, Style::Large);
            let (p, l) = (object_area(&plain), object_area(&large));
            assert!((0.04..0.09).contains(&p) && l / p > 2.3, "{background:?}: plain {p:.3}, large {l:.3}");
            // The analyzer still reads the scene off a large clip.
            let a = crate::analyze(&large);
            assert_eq!((a.background, a.color, a.motion), (background, Some(Color::Red), Some(Motion::Left)));
        }
    }
}
