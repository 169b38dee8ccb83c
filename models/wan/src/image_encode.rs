//! The image-to-video graph's `image_encode` stage: the request's first (and last) frame through
//! the CLIP image encoder (for cross-attention) and through the VAE (the conditioning latents).

use std::sync::Arc;

use anyhow::{Context, Result};
use fastvideo_layers::image_processor::Rgb8;
use fastvideo_pipeline::{NodeCtx, Stage, Value, Values};
use fastvideo_request::{reframe, ImageRole, InputImage, Reframed, ResizeMode};

use crate::image_condition::image_condition;
use crate::image_resize::picture_to_unit;
use crate::loader::ClipImage;
use crate::vae::AutoencoderKLWan;
use crate::values::{IMAGE_EMBEDS, LATENT_CONDITION};

pub(crate) struct ImageEncode {
    /// The CLIP encoder whose states the transformer attends to (Wan 2.1); `None`: the
    /// picture reaches the model through the condition latents alone (Wan 2.2).
    pub clip: Option<ClipImage>,
    pub vae: Arc<AutoencoderKLWan>,
    /// A first-and-last-frame model (its transformer has image positions for two pictures).
    pub last_frame: bool,
}

fn rgb(i: &InputImage) -> Rgb8<'_> {
    Rgb8 { width: i.width, height: i.height, data: &i.rgb }
}

impl Stage for ImageEncode {
    fn run(&self, ctx: &NodeCtx, values: &mut Values) -> Result<()> {
        let req = ctx.request;
        let Some(first) = req.image(ImageRole::FirstFrame) else {
            anyhow::bail!("inputs: an image-to-video request needs an image (the first frame)");
        };
        let last = req.image(ImageRole::LastFrame);
        match (self.last_frame, last) {
            (true, None) => anyhow::bail!("inputs: this first-and-last-frame model needs a last_frame image too"),
            (false, Some(_)) => anyhow::bail!("inputs: this model takes no last_frame image (it is not a FLF2V model)"),
            _ => {}
        }
        // The VAE sees the pictures fitted to the output size (`resize_mode`). CLIP sees them as
        // given when stretched (its processor resizes and crops them; diffusers' default), else
        // as fitted, so both see the same part of the picture.
        let mode = req.resize_mode;
        let (h, w) = (req.height as i64, req.width as i64);
        let fitted: Vec<Reframed> = std::iter::once(first)
            .chain(last)
            .map(|i| reframe(&i.rgb, i.width, i.height, w as u32, h as u32, mode))
            .collect();
        let pictures: Vec<Rgb8> = if mode == ResizeMode::Stretch {
            std::iter::once(first).chain(last).map(rgb).collect()
        } else {
            fitted.iter().map(|f| Rgb8 { width: f.width, height: f.height, data: &f.rgb }).collect()
        };
        if let Some(clip) = &self.clip {
            let pixels = clip.processor.preprocess(&pictures, ctx.device)?;
            let embeds = clip.encoder.penultimate(&pixels).context("image encoder")?;
            values.insert(IMAGE_EMBEDS, Value::Tensor(embeds));
        }
        let first = picture_to_unit(first, mode, w, h, ctx.device)?;
        let last = last.map(|l| picture_to_unit(l, mode, w, h, ctx.device)).transpose()?;
        let cond = image_condition(&self.vae, &first, last.as_ref(), req.num_frames as i64)?;
        values.insert(LATENT_CONDITION, Value::Tensor(cond));
        Ok(())
    }
}

/// Wan 2.2 TI2V's `image_encode`: the request's picture, fitted to the output size, VAE-encoded
/// on its own (no blank frames after it) and normalised: the clean first latent frame
/// `[1, z, 1, h, w]` the denoise loop holds fixed. Nothing for a text-only request.
pub(crate) struct FirstFrameEncode {
    pub vae: Arc<AutoencoderKLWan>,
}

impl Stage for FirstFrameEncode {
    fn run(&self, ctx: &NodeCtx, values: &mut Values) -> Result<()> {
        let req = ctx.request;
        let Some(first) = req.image(ImageRole::FirstFrame) else { return Ok(()) };
        if req.image(ImageRole::LastFrame).is_some() {
            anyhow::bail!("inputs: this model takes no last_frame image (only a first frame)");
        }
        let picture = picture_to_unit(first, req.resize_mode, req.width as i64, req.height as i64, ctx.device)?;
        let latent = self.vae.normalize(&self.vae.encode(&picture.unsqueeze(2))?);
        values.insert(LATENT_CONDITION, Value::Tensor(latent));
        Ok(())
    }
}
