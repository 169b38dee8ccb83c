//! How a request's condition latents reach the denoiser, a rule each family picks per pipeline.
//! The loop knows only [`LatentCondition`]; the one rule every family may use lives here
//! ([`ChannelCondition`]: appended to the latents' channels, as Wan 2.1 image-to-video and
//! inpainting models take a mask and an encoded picture). A family with another rule (Wan 2.2
//! TI2V's clean first frame at timestep 0) implements the trait in its own crate.

use anyhow::{ensure, Result};
use tch::{Device, Tensor};

/// Where condition latents go and what they change in the loop.
pub trait LatentCondition: Send + Sync {
    /// Checks condition latents `c` against the request's latents `l` before the first step;
    /// the error says what did not match.
    fn check(&self, c: &Tensor, l: &Tensor) -> Result<()>;

    /// The denoiser's input for `latents` with the condition `c`.
    fn model_input(&self, latents: &Tensor, c: &Tensor) -> Tensor;

    /// The timesteps of the rows of one forward at model times `t` (one per row), for
    /// `latents` (one row's): `[rows]` unless the rule times parts of the latents apart.
    fn timesteps(&self, t: &[f32], _latents: &Tensor, device: Device) -> Tensor {
        Tensor::from_slice(t).to_device(device)
    }

    /// The loop's result from its last latents (unchanged unless the rule pins a part).
    fn output(&self, latents: Tensor, _c: &Tensor) -> Tensor {
        latents
    }
}

/// `[B, C', …]` appended to the latents' channels (dimension 1) at every forward, in the
/// latents' own layout (Wan: `[B, C', F, H, W]`).
#[derive(Clone, Copy, Debug, Default)]
pub struct ChannelCondition;

impl LatentCondition for ChannelCondition {
    fn check(&self, c: &Tensor, l: &Tensor) -> Result<()> {
        let (s, l) = (c.size(), l.size());
        ensure!(
            s.len() == l.len() && s.len() >= 2 && s[0] == l[0] && s[2..] == l[2..],
            "denoise: condition latents {s:?} do not match the latents {l:?} outside the channels"
        );
        Ok(())
    }

    fn model_input(&self, latents: &Tensor, c: &Tensor) -> Tensor {
        Tensor::cat(&[latents, &c.to_kind(latents.kind())], 1)
    }
}
