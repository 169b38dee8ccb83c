//! `vae/config.json`, checked against what this implementation runs.

use std::path::Path;

use anyhow::{ensure, Result};
use fastvideo_layers::config::{read_config_with, unsupported};
use serde::Deserialize;

/// `vae/config.json`. Defaults are diffusers' class defaults (the Wan 2.1 VAE):
/// `AutoencoderKLWan.__init__` in `src/diffusers/models/autoencoders/autoencoder_kl_wan.py` of
/// diffusers v0.42.1, the tag this project pins (tests/fixtures/requirements.txt).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct VaeConfig {
    /// Channels of the first level; each level multiplies them by `dim_mult`.
    pub base_dim: i64,
    /// The decoder's `base_dim` where it differs from the encoder's (Wan 2.2).
    pub decoder_base_dim: Option<i64>,
    /// Latent channels.
    pub z_dim: i64,
    /// Per level: its channels as a multiple of `base_dim`.
    pub dim_mult: Vec<i64>,
    /// Residual blocks per level.
    pub num_res_blocks: i64,
    /// diffusers' attention scales: accepted, unused (no level attends by it).
    pub attn_scales: Vec<f64>,
    /// Per downsampling level: whether it halves time too (diffusers' spelling).
    pub temperal_downsample: Vec<bool>,
    /// Training only: accepted, no effect on inference.
    pub dropout: f64,
    /// Per latent channel: the mean the latents are normalised by.
    pub latents_mean: Vec<f64>,
    /// Per latent channel: the standard deviation the latents are normalised by.
    pub latents_std: Vec<f64>,
    /// Wan 2.2's residual up/down blocks instead of Wan 2.1's.
    pub is_residual: bool,
    /// Channels in: the video's 3 with each patch's pixels folded in (3 × patch_size²).
    #[serde(alias = "input_channels")]
    pub in_channels: i64,
    /// Channels out, as `in_channels`.
    pub out_channels: i64,
    /// Pixels folded into channels per side before encoding (Wan 2.2); `None` for none.
    pub patch_size: Option<i64>,
    /// Frames per latent frame, checked against `temperal_downsample` when given.
    pub scale_factor_temporal: Option<i64>,
    /// Pixels per latent along height and width, checked against the levels and patch when given.
    pub scale_factor_spatial: Option<i64>,
}

impl Default for VaeConfig {
    fn default() -> Self {
        Self {
            base_dim: 96,
            decoder_base_dim: None,
            z_dim: 16,
            dim_mult: vec![1, 2, 4, 4],
            num_res_blocks: 2,
            attn_scales: vec![],
            temperal_downsample: vec![false, true, true],
            dropout: 0.0,
            latents_mean: vec![],
            latents_std: vec![],
            is_residual: false,
            in_channels: 3,
            out_channels: 3,
            patch_size: None,
            scale_factor_temporal: Some(4),
            scale_factor_spatial: Some(8),
        }
    }
}

impl VaeConfig {
    /// Reads `vae/config.json`; unknown keys and values this crate cannot run are refused, naming
    /// them.
    pub fn load(path: &Path) -> Result<Self> {
        // `clip_output` was in an unreleased diffusers; released ones ignore it and always clamp.
        let cfg: Self = read_config_with(path, &[&["clip_output"]])?;
        if let Some(p) = cfg.patch_size.filter(|&p| p < 1) {
            return Err(unsupported(path, "patch_size", p, "a positive integer or null"));
        }
        // The video's 3 channels, with each patch's pixels folded into channels.
        let folded = 3 * cfg.patch() * cfg.patch();
        for (key, v) in [("in_channels", cfg.in_channels), ("out_channels", cfg.out_channels)] {
            if v != folded {
                return Err(unsupported(path, key, v, &format!("3 × patch_size² = {folded}")));
            }
        }
        let levels = cfg.dim_mult.len();
        ensure!(
            levels >= 1 && cfg.temperal_downsample.len() + 1 == levels,
            "{}: temperal_downsample needs {} entries for dim_mult {:?}",
            path.display(),
            levels - 1,
            cfg.dim_mult
        );
        let t = 1i64 << cfg.temperal_downsample.iter().filter(|&&b| b).count();
        let s = (1i64 << (levels - 1)) * cfg.patch();
        if cfg.scale_factor_temporal.is_some_and(|v| v != t) {
            return Err(unsupported(
                path,
                "scale_factor_temporal",
                cfg.scale_factor_temporal.unwrap(),
                &format!("the layers give {t}"),
            ));
        }
        if cfg.scale_factor_spatial.is_some_and(|v| v != s) {
            return Err(unsupported(
                path,
                "scale_factor_spatial",
                cfg.scale_factor_spatial.unwrap(),
                &format!("the layers give {s}"),
            ));
        }
        for (k, v) in [("latents_mean", &cfg.latents_mean), ("latents_std", &cfg.latents_std)] {
            ensure!(
                v.len() as i64 == cfg.z_dim,
                "{}: `{k}` has {} values, z_dim is {}",
                path.display(),
                v.len(),
                cfg.z_dim
            );
        }
        Ok(cfg)
    }
    /// Frames per latent frame: 2 per level that halves time.
    pub fn temporal_factor(&self) -> i64 {
        1 << self.temperal_downsample.iter().filter(|&&b| b).count()
    }
    /// Pixels per latent along height and width: the coders' 2× levels times the patch.
    pub fn spatial_factor(&self) -> i64 {
        (1 << (self.dim_mult.len() - 1)) * self.patch()
    }
    /// The side of the pixel patches folded into channels (Wan 2.2: 2), 1 without.
    pub fn patch(&self) -> i64 {
        self.patch_size.unwrap_or(1)
    }
}
