//! How an LTX-2 loop moves its latents each step: the pipeline's Euler, or one of the ComfyUI
//! samplers its templates run — Euler ancestral (fresh noise each step) and gradient estimation
//! (Euler on the velocity extrapolated from the last step's).

use anyhow::Result;
use fastvideo_pipeline::denoise::seeded_noise;
use fastvideo_pipeline::sampler::{euler_ancestral_rf, gradient_estimate, step_noise_seed, GE_GAMMA};
use fastvideo_request::{ResolvedRequest, SamplerKind};
use tch::Tensor;

/// A loop's stepping rule and what it carries between steps.
pub(crate) enum Stepping {
    /// The pipeline's Euler.
    Euler,
    /// Euler ancestral: the seed its step noise derives from.
    Ancestral(u64),
    /// Gradient estimation: the last step's (video, audio) velocities.
    GradientEstimation(Option<(Tensor, Tensor)>),
}

impl Stepping {
    /// The request's sampler for the base loop or (`refine`) the refine loop, whose noise comes
    /// from streams of the seed of its own; a sampler LTX-2 does not run is refused naming
    /// `sampling.sampler`.
    pub(crate) fn of(req: &ResolvedRequest, refine: bool) -> Result<Self> {
        Ok(match req.sampler {
            SamplerKind::Euler => Stepping::Euler,
            SamplerKind::EulerAncestral => Stepping::Ancestral(req.seed.wrapping_add(if refine { 20 } else { 10 })),
            SamplerKind::GradientEstimation => Stepping::GradientEstimation(None),
            other => anyhow::bail!(
                "sampling.sampler: LTX-2's loops step with `euler`, `euler_ancestral` or `gradient_estimation`; `{}` \
                 is not run here",
                other.as_str()
            ),
        })
    }

    /// `(video, audio)` one step on, from level `sigmas[step]` to `sigmas[step + 1]` along the
    /// guided velocities `v` (float32): Euler's `x + (σ' − σ)·v` with the step size rounded to
    /// float32 first, as the pipeline's scheduler does.
    pub(crate) fn step(
        &mut self,
        x: (&Tensor, &Tensor),
        v: (&Tensor, &Tensor),
        sigmas: &[f32],
        step: usize,
    ) -> (Tensor, Tensor) {
        let (sigma, next) = (sigmas[step] as f64, sigmas[step + 1] as f64);
        let dt = (sigmas[step + 1] - sigmas[step]) as f64;
        match self {
            Stepping::Euler => (x.0 + v.0 * dt, x.1 + v.1 * dt),
            Stepping::Ancestral(seed) => {
                let one = |x: &Tensor, v: &Tensor, stream: u64| {
                    let x0 = x - v * sigma;
                    let seed = step_noise_seed(seed.wrapping_add(stream), step as u32);
                    euler_ancestral_rf(x, &x0, sigma, next, || seeded_noise(&x.size(), seed, x.device()))
                };
                (one(x.0, v.0, 0), one(x.1, v.1, 1))
            }
            Stepping::GradientEstimation(prev) => {
                let moved = (
                    gradient_estimate(v.0, prev.as_ref().map(|p| &p.0), GE_GAMMA),
                    gradient_estimate(v.1, prev.as_ref().map(|p| &p.1), GE_GAMMA),
                );
                prev.replace((v.0.shallow_clone(), v.1.shallow_clone()));
                (x.0 + moved.0 * dt, x.1 + moved.1 * dt)
            }
        }
    }
}
