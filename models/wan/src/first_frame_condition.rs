//! Wan 2.2 TI2V's condition (diffusers' `expand_timesteps`): the clean first latent frame
//! `[B, C, 1, H, W]` (same channels as the latents) replaces the latents' first frame in the
//! model input, its tokens run at timestep 0, and it replaces the first frame of the result.

use anyhow::{ensure, Result};
use fastvideo_pipeline::denoise::LatentCondition;
use tch::{Device, Tensor};

/// The clean first latent frame as the condition.
#[derive(Clone, Copy, Debug, Default)]
pub struct FirstFrameCondition;

impl LatentCondition for FirstFrameCondition {
    fn check(&self, c: &Tensor, l: &Tensor) -> Result<()> {
        let (s, l) = (c.size(), l.size());
        ensure!(
            s.len() == 5 && l.len() == 5 && s[0] == l[0] && s[1] == l[1] && s[2] == 1 && s[3..] == l[3..],
            "denoise: first-frame latents {s:?} must be one frame of the latents {l:?}"
        );
        Ok(())
    }

    fn model_input(&self, latents: &Tensor, c: &Tensor) -> Tensor {
        with_first_frame(latents, &c.to_kind(latents.kind()))
    }

    /// `[rows, F]`: the first frame's column at 0 (its tokens are clean), the others at `t`.
    fn timesteps(&self, t: &[f32], latents: &Tensor, device: Device) -> Tensor {
        let frames = latents.size()[2];
        let per_frame: Vec<f32> =
            t.iter().flat_map(|&v| (0..frames).map(move |f| if f == 0 { 0.0 } else { v })).collect();
        Tensor::from_slice(&per_frame).view([t.len() as i64, frames]).to_device(device)
    }

    fn output(&self, latents: Tensor, c: &Tensor) -> Tensor {
        with_first_frame(&latents, &c.to_kind(latents.kind()))
    }
}

/// `latents` with its first frame replaced by `first` (`[B, C, 1, H, W]`).
fn with_first_frame(latents: &Tensor, first: &Tensor) -> Tensor {
    let f = latents.size()[2];
    if f == 1 {
        return first.shallow_clone();
    }
    Tensor::cat(&[first, &latents.narrow(2, 1, f - 1)], 2)
}
