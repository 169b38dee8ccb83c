//! Live previews for Wan-family models: the last latent frame of the current clean estimate,
//! average-pooled until its longer side is at most [`MAX_LATENT_SIDE`], through the model's own
//! VAE decoder (one frame), written as a small JPEG. The pooling keeps the cost a small fraction
//! of a step at real size (480×832: a 15×26 latent, a 120×208 picture; measured in
//! docs/benchmarks.md). A linear latent-to-RGB map was tried first and dropped: fitted on this
//! project's default VAE it missed solid colours by half their range.

use std::sync::Arc;

use anyhow::{ensure, Result};
use fastvideo_pipeline::LatentPreview;
use tch::{Device, Kind, Tensor};

use crate::vae::AutoencoderKLWan;

/// Longest latent side decoded for a preview.
pub const MAX_LATENT_SIDE: i64 = 32;

/// The preview of a Wan model: its VAE.
pub struct WanPreview {
    vae: Arc<AutoencoderKLWan>,
}

// SAFETY: the VAE's weights are only read after loading, and libtorch's tensor reads are
// thread-safe; decoding keeps its cache on the stack of each call.
unsafe impl Send for WanPreview {}
unsafe impl Sync for WanPreview {}

impl WanPreview {
    /// Previews decoded with `vae`.
    pub fn new(vae: Arc<AutoencoderKLWan>) -> Self {
        Self { vae }
    }
}

impl LatentPreview for WanPreview {
    fn preview(&self, latents: &Tensor) -> Result<(u32, u32, Vec<u8>)> {
        let s = latents.size();
        ensure!(s.len() == 5, "preview: latents {s:?} are not [B, C, F, h, w]");
        let _guard = tch::no_grad_guard();
        let frame = latents.narrow(0, 0, 1).narrow(2, s[2] - 1, 1); // [1, z, 1, h, w]
        let pool = (s[3].max(s[4]) + MAX_LATENT_SIDE - 1) / MAX_LATENT_SIDE;
        let frame = if pool > 1 {
            frame.squeeze_dim(2).avg_pool2d([pool, pool], [pool, pool], [0, 0], true, true, None::<i64>).unsqueeze(2)
        } else {
            frame
        };
        let video = self.vae.decode(&self.vae.denormalize(&frame.to_kind(Kind::Float)))?; // [1, 3, 1, H, W]
        let rgb = video.get(0).select(1, 0); // [3, H, W]
        let (h, w) = (rgb.size()[1], rgb.size()[2]);
        let bytes = ((rgb + 1.0) * 127.5).round().clamp(0.0, 255.0).to_kind(Kind::Uint8);
        let pixels = Vec::<u8>::try_from(bytes.permute([1, 2, 0]).contiguous().view([-1]).to_device(Device::Cpu))?;
        let mut jpeg = Vec::new();
        let encoder = image::codecs::jpeg::JpegEncoder::new_with_quality(&mut jpeg, 80);
        image::ImageEncoder::write_image(encoder, &pixels, w as u32, h as u32, image::ExtendedColorType::Rgb8)?;
        Ok((w as u32, h as u32, jpeg))
    }
}
