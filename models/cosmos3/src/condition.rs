//! The vision conditioning of image to video and video continuation, as
//! `Cosmos3OmniPipeline.prepare_latents` builds it: the picture resized to cover the output
//! (antialiased bilinear, ceil) and centre-cropped, repeated over every frame; or the video's
//! frames resized (PIL bilinear), its first `4·max(clean)+1` kept and the last repeated to the
//! length; encoded by the VAE (posterior mode) and normalised `(mu - mean)·(1/std)`. The clean
//! latent frames (picture: 0; video: 0 and 1) are given, not denoised.

use std::sync::Arc;

use anyhow::{bail, ensure, Context, Result};
use fastvideo_layers::image_processor::pil::{resize, Filter};
use fastvideo_pipeline::{NodeCtx, Stage, Value, Values};
use fastvideo_request::{ImageRole, InputImage, InputVideo, TaskType};
use fastvideo_wan::AutoencoderKLWan;
use tch::{Device, Kind, Tensor};

use crate::values::{ACTION_CLEAN, ACTION_CONDITION, CLEAN_FRAMES, CONDITION_LATENTS};

/// Latent frames a continuation keeps clean (diffusers' `condition_frame_indexes_vision`).
pub const VIDEO_CLEAN_FRAMES: [i64; 2] = [0, 1];

/// `[1, 3, H, W]` float32 in [-1, 1] of `image`: resized to cover `height`x`width` (ceil),
/// antialiased bilinear, centre-cropped, rounded to 8 bits.
pub fn cover(image: &InputImage, height: i64, width: i64, device: Device) -> Result<Tensor> {
    let (h, w) = (image.height as i64, image.width as i64);
    ensure!(image.rgb.len() as i64 == h * w * 3, "image: {} bytes for {w}x{h} RGB", image.rgb.len());
    let x =
        Tensor::from_slice(&image.rgb).to_device(device).view([1, h, w, 3]).permute([0, 3, 1, 2]).to_kind(Kind::Float);
    let scale = (width as f64 / w as f64).max(height as f64 / h as f64);
    let (rh, rw) = ((scale * h as f64).ceil() as i64, (scale * w as f64).ceil() as i64);
    let x = x.internal_upsample_bilinear2d_aa([rh, rw], false, None, None);
    // Python's round(): half to even, as the reference crops.
    let top = ((rh - height) as f64 / 2.0).round_ties_even() as i64;
    let left = ((rw - width) as f64 / 2.0).round_ties_even() as i64;
    let x = x.narrow(2, top, height).narrow(3, left, width);
    Ok(x.round().clamp(0.0, 255.0) / 127.5 - 1.0)
}

/// `[1, 3, F, H, W]` float32 in [-1, 1] of the first `keep` frames of `video`, each resized to
/// `height`x`width` (PIL bilinear), the last repeated up to `frames`.
pub fn continuation(
    video: &InputVideo,
    keep: i64,
    frames: i64,
    height: i64,
    width: i64,
    device: Device,
) -> Result<Tensor> {
    let (h, w) = (video.height as usize, video.width as usize);
    let n = (video.frames as i64).min(keep).min(frames);
    ensure!(n > 0, "video: no frames");
    let per = h * w * 3;
    let mut rgb = Vec::with_capacity(n as usize * height as usize * width as usize * 3);
    for f in 0..n as usize {
        rgb.extend(resize(Filter::Bilinear, &video.rgb[f * per..(f + 1) * per], w, h, width as usize, height as usize));
    }
    let x = Tensor::from_slice(&rgb).to_device(device).view([n, height, width, 3]).to_kind(Kind::Float) / 255.0;
    let x = (x * 2.0 - 1.0).permute([3, 0, 1, 2]).unsqueeze(0);
    Ok(match frames - n {
        0 => x,
        pad => Tensor::cat(&[&x, &x.narrow(2, n - 1, 1).expand([1, 3, pad, height, width], false)], 2),
    })
}

/// The conditioning node: writes the clean latents and which latent frames are clean (and, for
/// the action tasks, the clean actions and which steps are clean).
pub struct VisionCondition {
    /// Wan 2.2's VAE.
    pub vae: Arc<AutoencoderKLWan>,
    /// The model's action width (0: no actions).
    pub action_dim: i64,
}

impl VisionCondition {
    /// `(mu - mean)·(1/std)` of `video [1, 3, F, H, W]`.
    fn encode(&self, video: &Tensor) -> Result<Tensor> {
        let c = &self.vae.cfg;
        let mu = self.vae.encode(video)?.to_kind(Kind::Float);
        let stat =
            |v: &[f64]| Tensor::from_slice(&v.iter().map(|x| *x as f32).collect::<Vec<_>>()).to_device(mu.device());
        let mean = stat(&c.latents_mean).view([1, c.z_dim, 1, 1, 1]);
        let inv_std = stat(&c.latents_std).reciprocal().view([1, c.z_dim, 1, 1, 1]);
        Ok((mu - mean) * inv_std)
    }
}

impl VisionCondition {
    /// The action tasks: the clip fitted into the canvas, encoded, the latents cropped to the
    /// content; the clean actions.
    fn action(&self, ctx: &NodeCtx, values: &mut Values) -> Result<()> {
        let req = ctx.request;
        let a = req.action.as_ref().context("an action task without its action condition")?;
        let (rgb, n, w, h) = match (req.image(ImageRole::FirstFrame), &req.video) {
            (Some(i), _) => (&i.rgb, 1, i.width, i.height),
            (None, Some(v)) => (&v.rgb, v.frames as usize, v.width, v.height),
            (None, None) => bail!("an action task without a picture or video"),
        };
        let spatial = self.vae.cfg.spatial_factor();
        let frames = req.num_frames as i64;
        let canvas = (req.height, req.width);
        let clip = crate::action::Clip { rgb, frames: n, width: w as usize, height: h as usize };
        let (clip, (ch, cw)) = crate::action::fit_clip(clip, frames, canvas, spatial as u32, ctx.device)?;
        let x0 = self.encode(&clip)?;
        let x0 = x0.narrow(3, 0, (ch / spatial).max(1)).narrow(4, 0, (cw / spatial).max(1)).contiguous();
        let clean = crate::action::clean_vision_frames(req.task, x0.size()[2]);
        values.insert(CONDITION_LATENTS, Value::Tensor(x0));
        values.insert(CLEAN_FRAMES, Value::Tensor(Tensor::from_slice(&clean)));
        let (actions, clean) = crate::action::clean_actions(req.task, a, self.action_dim, ctx.device);
        values.insert(ACTION_CONDITION, Value::Tensor(actions));
        values.insert(ACTION_CLEAN, Value::Tensor(Tensor::from_slice(&clean)));
        Ok(())
    }
}

impl Stage for VisionCondition {
    fn run(&self, ctx: &NodeCtx, values: &mut Values) -> Result<()> {
        let req = ctx.request;
        let (f, h, w) = (req.num_frames as i64, req.height as i64, req.width as i64);
        let (video, clean) = match req.task {
            TaskType::I2v => {
                // One frame given clean would leave nothing to generate.
                ensure!(
                    f > 1,
                    "diffusion.num_frames: image to video makes more than the given frame (ask for 4k+1 > 1)"
                );
                let image = req.image(ImageRole::FirstFrame).context("image to video needs a first-frame picture")?;
                let x = cover(image, h, w, ctx.device)?.unsqueeze(2);
                (x.expand([1, 3, f, h, w], false).contiguous(), vec![0])
            }
            TaskType::V2v => {
                let video = req.video.as_ref().context("video continuation needs a video")?;
                let keep = VIDEO_CLEAN_FRAMES.iter().max().unwrap() * self.vae.cfg.temporal_factor() + 1;
                // The kept frames are latent frames 0 and 1; the continuation needs a frame after them.
                ensure!(
                    f > keep,
                    "diffusion.num_frames: {f}: a continuation keeps the video's first {keep} frames; ask for more \
                     (at least {})",
                    keep + self.vae.cfg.temporal_factor()
                );
                (continuation(video, keep, f, h, w, ctx.device)?, VIDEO_CLEAN_FRAMES.to_vec())
            }
            task if fastvideo_request::is_action_task(task) => return self.action(ctx, values),
            other => bail!("no vision conditioning for `{}`", other.as_str()),
        };
        let x0 = self.encode(&video)?;
        values.insert(CONDITION_LATENTS, Value::Tensor(x0));
        values.insert(CLEAN_FRAMES, Value::Tensor(Tensor::from_slice(&clean)));
        Ok(())
    }
}
