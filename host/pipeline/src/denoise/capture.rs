//! The denoising trajectory a request may ask for (`return_trajectory`): the latents at the
//! step boundaries it keeps, with the schedule and the stochastic steps' log-probabilities.

use anyhow::Result;
use fastvideo_request::{ResolvedRequest, TrajectoryArtifact};
use tch::{Device, Kind, Tensor};

use crate::sampler::Sampler;

/// The latents a request's trajectory keeps: at each boundary `i` in `keep`, the sample before
/// step `i` (the final one at `i = steps`).
pub(super) struct Capture {
    keep: Vec<bool>,
    latents: Vec<(u32, Tensor)>,
}

impl Capture {
    pub(super) fn of(req: &ResolvedRequest) -> Option<Self> {
        if !req.outputs.return_trajectory {
            return None;
        }
        let n = req.steps as usize;
        let mut keep = vec![req.sde_steps.is_empty(); n + 1];
        for &i in &req.sde_steps {
            keep[i as usize] = true;
            keep[i as usize + 1] = true;
        }
        Some(Self { keep, latents: Vec::new() })
    }

    /// Boundary `index`'s latents, kept if wanted; each boundary is seen once (before its step,
    /// the last one at finalize).
    pub(super) fn see(&mut self, index: usize, latents: &Tensor) {
        if self.keep.get(index).copied().unwrap_or(false) {
            // The loop replaces its latents every step, never writes into them: no copy needed.
            self.latents.push((index as u32, latents.shallow_clone()));
        }
    }

    pub(super) fn into_artifact(
        mut self,
        req: &ResolvedRequest,
        sampler: &dyn Sampler,
        last: &Tensor,
    ) -> Result<TrajectoryArtifact> {
        self.see(sampler.step_index(), last);
        let latent_shape = self.latents.first().map(|(_, t)| t.size()).unwrap_or_default();
        let latent_steps = self.latents.iter().map(|(i, _)| *i).collect();
        let mut latents = Vec::new();
        for (_, t) in &self.latents {
            let t = t.to_kind(Kind::Float).to_device(Device::Cpu).contiguous();
            latents.extend(Vec::<f32>::try_from(t.flatten(0, -1))?);
        }
        let lp = sampler.log_probs();
        Ok(TrajectoryArtifact {
            timesteps: sampler.timesteps().to_vec(),
            sigmas: sampler.sigmas().to_vec(),
            noise_level: req.noise_level,
            sde_steps: lp.iter().map(|(i, _)| *i).collect(),
            log_probs: lp.iter().map(|(_, p)| *p).collect(),
            latent_steps,
            latent_shape,
            latents,
        })
    }
}
