//! Image to video, as `LTX2ImageToVideoPipeline` conditions it: the first frame resized to the
//! loop's size (its video processor: PIL bilinear), encoded by the video VAE (posterior mode),
//! normalised by the latent statistics *without* the scaling factor (the pipeline's call), and
//! kept clean as the first latent frame: its tokens get timestep 0 and the sampler leaves them.
//! The reference first re-compresses the picture with H.264 (`image_crf`, 33 for LTX-2); that is
//! not done here (the pipeline's `image_crf=0`).

use std::sync::Arc;

use anyhow::{Context, Result};
use fastvideo_layers::image_processor::pil::{resize, Filter};
use fastvideo_pipeline::{NodeCtx, Stage, Value, Values};
use fastvideo_request::{ImageRole, InputImage};
use tch::{Device, Kind, Tensor};

use crate::latents::{normalize_video, Statistics};
use crate::refine::two_stage;
use crate::values::CONDITION;
use crate::video_encoder::Ltx2VideoEncoder;

/// The clean first latent frame `[1, C, 1, H/s, W/s]` of `image` at `height` × `width`.
pub fn condition_latents(
    encoder: &Ltx2VideoEncoder,
    stats: &Statistics,
    image: &InputImage,
    (height, width): (u32, u32),
    device: Device,
) -> Result<Tensor> {
    let (w, h) = (image.width as usize, image.height as usize);
    anyhow::ensure!(image.rgb.len() == w * h * 3, "image: {} bytes for {w}x{h} RGB", image.rgb.len());
    let rgb = match (w as u32, h as u32) == (width, height) {
        true => image.rgb.clone(),
        false => resize(Filter::Bilinear, &image.rgb, w, h, width as usize, height as usize),
    };
    let x = Tensor::from_slice(&rgb).view([height as i64, width as i64, 3]).to_device(device);
    let x =
        (x.permute([2, 0, 1]).to_kind(Kind::Float) / 255.0 * 2.0 - 1.0).view([1, 3, 1, height as i64, width as i64]);
    let z = encoder.encode(&x.to_kind(encoder.kind()))?.to_kind(Kind::Float);
    let (mean, std, _) = &stats.video;
    Ok(normalize_video(&z, &mean.to_device(device), &std.to_device(device), 1.0))
}

/// The request's first frame as `CONDITION`, at the base loop's size (half of it for the
/// two-stage recipe).
pub struct Condition {
    /// The video VAE's encoder.
    pub encoder: Arc<Ltx2VideoEncoder>,
    /// Latent statistics.
    pub stats: Arc<Statistics>,
}

impl Stage for Condition {
    fn run(&self, ctx: &NodeCtx, values: &mut Values) -> Result<()> {
        let req = ctx.request;
        let image = req.image(ImageRole::FirstFrame).context("image to video: the first frame (--image)")?;
        let size = match two_stage(req) {
            true => (req.height / 2, req.width / 2),
            false => (req.height, req.width),
        };
        let z = condition_latents(&self.encoder, &self.stats, image, size, ctx.device)?;
        values.insert(CONDITION, Value::Tensor(z));
        Ok(())
    }
}
