//! `tiny_vae/config.json`.

use std::path::Path;

use anyhow::{ensure, Context, Result};
use serde::Deserialize;

/// The decoder's shape: latent channels in, the widths of its four levels, which of the three
/// stages double the frames and the side, and the output's pixel-shuffle patch.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct TinyDecoderConfig {
    /// Latent channels in (the VAE's `z_dim`).
    pub latent_channels: i64,
    /// Widths of the four levels.
    pub channels: [i64; 4],
    /// Per stage: whether it doubles the frames.
    pub time_upscale: [bool; 3],
    /// Per stage: whether it doubles the height and width.
    pub space_upscale: [bool; 3],
    /// The output's pixel-shuffle patch (1 when absent).
    #[serde(default = "one")]
    pub patch_size: i64,
}

fn one() -> i64 {
    1
}

impl TinyDecoderConfig {
    /// Reads `tiny_vae/config.json`, refusing shapes the decoder cannot build.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let cfg: Self =
            serde_json::from_str(&text).with_context(|| format!("{}: not a tiny decoder config", path.display()))?;
        ensure!(
            cfg.latent_channels > 0 && cfg.channels.iter().all(|c| *c > 0),
            "{}: channels must be positive",
            path.display()
        );
        ensure!(cfg.patch_size >= 1, "{}: `patch_size` must be at least 1", path.display());
        Ok(cfg)
    }

    /// Frames out per latent frame (4 for Wan: two stages double them).
    pub fn time_factor(&self) -> i64 {
        1 << self.time_upscale.iter().filter(|t| **t).count()
    }

    /// Pixels out per latent pixel along a side.
    pub fn space_factor(&self) -> i64 {
        (1 << self.space_upscale.iter().filter(|s| **s).count()) * self.patch_size
    }

    /// A config like the full-size TAEHV decoder's, for benchmarks on random weights.
    pub fn full_size(latent_channels: i64) -> Self {
        Self {
            latent_channels,
            channels: [256, 128, 64, 64],
            time_upscale: [false, true, true],
            space_upscale: [true, true, true],
            patch_size: 1,
        }
    }
}
