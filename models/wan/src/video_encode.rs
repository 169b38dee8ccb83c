//! The `video_encode` stage of the text-to-video graph: a video-to-video request's input video,
//! each frame fitted to the output size (`resize_mode`; stretched by default, as diffusers'
//! `VideoProcessor` does), VAE-encoded (the
//! posterior mean) and normalised: the clean latents the denoise loop noises to `strength`.
//! Requests without a video pass through.

use std::sync::Arc;

use anyhow::Result;
use fastvideo_pipeline::{NodeCtx, Stage, Value, Values};
use tch::Tensor;

use crate::image_resize::rgb8_to_unit;
use crate::vae::AutoencoderKLWan;
use crate::values::CLEAN_LATENTS;

pub(crate) struct VideoEncode {
    pub vae: Arc<AutoencoderKLWan>,
}

impl Stage for VideoEncode {
    fn run(&self, ctx: &NodeCtx, values: &mut Values) -> Result<()> {
        let req = ctx.request;
        let Some(v) = &req.video else { return Ok(()) };
        let frame_bytes = (v.width * v.height * 3) as usize;
        let (h, w) = (req.height as i64, req.width as i64);
        let frames = (0..req.num_frames as usize)
            .map(|i| {
                let frame = &v.rgb[i * frame_bytes..(i + 1) * frame_bytes];
                rgb8_to_unit(frame, v.width, v.height, req.resize_mode, w, h, ctx.device)
            })
            .collect::<Result<Vec<_>>>()?;
        let video = Tensor::stack(&frames, 2);
        let clean = self.vae.normalize(&self.vae.encode(&video)?);
        values.insert(CLEAN_LATENTS, Value::Tensor(clean));
        Ok(())
    }
}
