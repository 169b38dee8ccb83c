//! A second look for the same scenes, which no prompt of the vocabulary asks for: diagonal
//! stripes over the flat background. The shipped LoRA adapter (models/default-lora-stripes) is
//! trained on it, and [`stripe_contrast`] measures whether a clip has it.

use crate::Clip;

/// How the background is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Style {
    /// The flat colour (the default model's data).
    #[default]
    Plain,
    /// 45° stripes, 8 pixels per period, alternating the colour and a tone 40 levels towards
    /// mid-grey.
    Striped,
}

/// Stripe period in pixels along a row.
pub const STRIPE_PERIOD: usize = 8;

impl Style {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "plain" => Some(Style::Plain),
            "striped" => Some(Style::Striped),
            _ => None,
        }
    }

    /// The background colour at pixel `(x, y)`.
    pub fn background(self, bg: [f32; 3], x: usize, y: usize) -> [f32; 3] {
        match self {
            Style::Plain => bg,
            Style::Striped if (x + y) % STRIPE_PERIOD < STRIPE_PERIOD / 2 => bg,
            Style::Striped => bg.map(|c| if c > 128.0 { c - 40.0 } else { c + 40.0 }),
        }
    }
}

/// How striped a clip's background is, in grey levels: along the top and bottom 6 rows (where
/// the object rarely is), the mean |difference| of pixels half a stripe period apart minus that
/// of pixels a whole period apart. About 40 for [`Style::Striped`], about 0 for a flat
/// background, whatever its colour.
pub fn stripe_contrast(clip: &Clip) -> f64 {
    let (w, h) = (clip.width, clip.height);
    let (half, full) = (STRIPE_PERIOD / 2, STRIPE_PERIOD);
    let luma = |f: usize, x: usize, y: usize| {
        let i = ((f * h + y) * w + x) * 3;
        clip.rgb[i..i + 3].iter().map(|&c| c as f64).sum::<f64>() / 3.0
    };
    let rows: Vec<usize> = (0..6.min(h)).chain(h.saturating_sub(6)..h).collect();
    let (mut shifted, mut same, mut n) = (0.0, 0.0, 0usize);
    for f in 0..clip.frames {
        for &y in &rows {
            for x in 0..w.saturating_sub(full) {
                let p = luma(f, x, y);
                shifted += (p - luma(f, x + half, y)).abs();
                same += (p - luma(f, x + full, y)).abs();
                n += 1;
            }
        }
    }
    if n == 0 {
        return 0.0;
    }
    (shifted - same) / n as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{render_styled, Background, Color, Motion, Scene, Shape, Variation};

    #[test]
    fn stripes_are_measured_on_every_background_and_read_as_the_same_scene() {
        for background in [Background::White, Background::Black, Background::Gray] {
            let scene = Scene { shape: Shape::Circle, color: Color::Red, motion: Motion::Left, background };
            let plain = render_styled(&scene, &Variation::canonical(), 5, 64, Style::Plain);
            let striped = render_styled(&scene, &Variation::canonical(), 5, 64, Style::Striped);
            let (p, s) = (stripe_contrast(&plain), stripe_contrast(&striped));
            assert!(p.abs() < 1.0 && s > 30.0, "{background:?}: plain {p:.1}, striped {s:.1}");
            // The analyzer still reads the scene off a striped clip.
            let a = crate::analyze(&striped);
            assert_eq!((a.background, a.color, a.motion), (background, Some(Color::Red), Some(Motion::Left)));
        }
    }
}
