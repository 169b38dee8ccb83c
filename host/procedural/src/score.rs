//! Tallies analyses against the scenes they were generated from: the numbers `fastvideo eval`
//! prints and docs/quality.md records.

use serde::Serialize;

use crate::{Analysis, Scene};

/// Correct counts per attribute over a set of clips.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Tally {
    /// Clips scored.
    pub clips: usize,
    /// Clips whose colour was right.
    pub color: usize,
    /// Clips whose shape was right.
    pub shape: usize,
    /// Clips whose motion was right.
    pub motion: usize,
    /// Clips whose background was right.
    pub background: usize,
    /// Clips with all four attributes right.
    pub all: usize,
}

/// Accuracies in [0, 1], as printed and written to JSON.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Accuracy {
    /// Fraction of clips with the right colour.
    pub color: f64,
    /// Fraction of clips with the right shape.
    pub shape: f64,
    /// Fraction of clips with the right motion.
    pub motion: f64,
    /// Fraction of clips with the right background.
    pub background: f64,
    /// Mean of the four attribute accuracies.
    pub attribute_mean: f64,
    /// Fraction of clips with every attribute right.
    pub all_correct: f64,
}

impl Tally {
    /// Scores one clip; returns whether every attribute was right.
    pub fn add(&mut self, scene: &Scene, got: &Analysis) -> bool {
        let c = got.color == Some(scene.color);
        let s = got.shape == Some(scene.shape);
        let m = got.motion == Some(scene.motion);
        let b = got.background == scene.background;
        self.clips += 1;
        self.color += c as usize;
        self.shape += s as usize;
        self.motion += m as usize;
        self.background += b as usize;
        self.all += (c && s && m && b) as usize;
        c && s && m && b
    }

    /// The counts as fractions of the clips scored (0 for none).
    pub fn accuracy(&self) -> Accuracy {
        let n = self.clips.max(1) as f64;
        let (color, shape, motion, background) =
            (self.color as f64 / n, self.shape as f64 / n, self.motion as f64 / n, self.background as f64 / n);
        Accuracy {
            color,
            shape,
            motion,
            background,
            attribute_mean: (color + shape + motion + background) / 4.0,
            all_correct: self.all as f64 / n,
        }
    }
}

/// Peak signal-to-noise ratio of two RGB8 pictures of one size, in dB (infinite when equal):
/// how closely an image-to-video clip's first frame reproduces the picture it was given.
pub fn psnr(a: &[u8], b: &[u8]) -> f64 {
    assert_eq!(a.len(), b.len(), "psnr of pictures of different sizes");
    let se: f64 = a.iter().zip(b).map(|(&x, &y)| (x as f64 - y as f64).powi(2)).sum();
    let mse = se / a.len().max(1) as f64;
    10.0 * (255.0f64 * 255.0 / mse).log10()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Background, Color, Motion, Shape};

    #[test]
    fn counts_each_attribute_separately() {
        let scene = Scene { shape: Shape::Star, color: Color::Blue, motion: Motion::Up, background: Background::Gray };
        let right = Analysis {
            background: Background::Gray,
            color: Some(Color::Blue),
            shape: Some(Shape::Star),
            motion: Some(Motion::Up),
        };
        let mut t = Tally::default();
        assert!(t.add(&scene, &right));
        assert!(!t.add(&scene, &Analysis { shape: None, motion: Some(Motion::Down), ..right }));
        let a = t.accuracy();
        assert_eq!((t.clips, t.all), (2, 1));
        assert_eq!((a.color, a.shape, a.motion, a.background), (1.0, 0.5, 0.5, 1.0));
        assert_eq!(a.attribute_mean, 0.75);
        assert_eq!(a.all_correct, 0.5);
    }

    #[test]
    fn psnr_of_known_errors() {
        let a = vec![100u8; 12];
        assert!(psnr(&a, &a).is_infinite());
        // Every byte off by 1: MSE 1, so 20 log10(255) = 48.13 dB; off by 16: MSE 256, 20 log10(255/16) = 24.05 dB.
        let b: Vec<u8> = a.iter().map(|x| x + 1).collect();
        assert!((psnr(&a, &b) - 48.1308).abs() < 1e-3, "{}", psnr(&a, &b));
        let c: Vec<u8> = a.iter().map(|x| x - 16).collect();
        assert!((psnr(&a, &c) - 24.0484).abs() < 1e-3, "{}", psnr(&a, &c));
    }
}
