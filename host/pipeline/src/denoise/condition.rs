//! How a request's condition latents reach the denoiser: appended to the latents' channels
//! (Wan 2.1 image-to-video), or as the clean first latent frame (Wan 2.2 TI2V's
//! `expand_timesteps`: the frame replaces the latents' first frame in the model input, its
//! tokens run at timestep 0, and it replaces the first frame of the result).

use anyhow::{ensure, Result};
use tch::{Device, Tensor};

/// Where condition latents go; bound per pipeline (the model decides).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ConditionMode {
    /// `[B, C', …]` appended to the latents' channels (dimension 1) at every forward, in the
    /// latents' own layout (Wan: `[B, C', F, H, W]`).
    #[default]
    Channels,
    /// `[B, C, 1, H, W]`, the clean first latent frame (same channels as the latents).
    FirstFrame,
}

impl ConditionMode {
    /// Checks condition latents `c` against the request's latents `l`.
    pub(super) fn check(self, c: &Tensor, l: &Tensor) -> Result<()> {
        let (s, l) = (c.size(), l.size());
        match self {
            ConditionMode::Channels => ensure!(
                s.len() == l.len() && s.len() >= 2 && s[0] == l[0] && s[2..] == l[2..],
                "denoise: condition latents {s:?} do not match the latents {l:?} outside the channels"
            ),
            ConditionMode::FirstFrame => ensure!(
                s.len() == 5 && s[0] == l[0] && s[1] == l[1] && s[2] == 1 && s[3..] == l[3..],
                "denoise: first-frame latents {s:?} must be one frame of the latents {l:?}"
            ),
        }
        Ok(())
    }

    /// The denoiser's input for `latents` with the condition `c`.
    pub(super) fn model_input(self, latents: &Tensor, c: &Tensor) -> Tensor {
        let c = c.to_kind(latents.kind());
        match self {
            ConditionMode::Channels => Tensor::cat(&[latents, &c], 1),
            ConditionMode::FirstFrame => with_first_frame(latents, &c),
        }
    }

    /// The timesteps of `rows` rows at model time `t`: `[rows]`, or with a first-frame condition
    /// `[rows, F]` with the first frame's column at 0 (its tokens are clean).
    pub(super) fn timesteps(self, conditioned: bool, t: &[f32], frames: i64, device: Device) -> Tensor {
        match (self, conditioned) {
            (ConditionMode::FirstFrame, true) => {
                let per_frame: Vec<f32> =
                    t.iter().flat_map(|&v| (0..frames).map(move |f| if f == 0 { 0.0 } else { v })).collect();
                Tensor::from_slice(&per_frame).view([t.len() as i64, frames]).to_device(device)
            }
            _ => Tensor::from_slice(t).to_device(device),
        }
    }

    /// The loop's result: with a first-frame condition, its first frame is the condition's.
    pub(super) fn output(self, latents: Tensor, c: Option<&Tensor>) -> Tensor {
        match (self, c) {
            (ConditionMode::FirstFrame, Some(c)) => with_first_frame(&latents, &c.to_kind(latents.kind())),
            _ => latents,
        }
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
