//! Flow-matching samplers. Each one is per-request state (UniPC keeps a history of model
//! outputs), built fresh by [`build`] and owned by the request's `LoopState`.
//!
//! Schedules are computed the way diffusers computes them — in float64, then rounded to float32 —
//! so timesteps and sigmas match the reference bit for bit; solver coefficients are computed in
//! float64 from those float32 sigmas.

mod ancestral;
mod dmd;
mod euler;
mod gradient;
mod schedule;
mod sde;
mod unipc;

pub use ancestral::{euler_ancestral_rf, EulerAncestral};
pub use dmd::{Dmd, StepNoise};
pub use euler::FlowMatchEuler;
pub use gradient::{gradient_estimate, GradientEstimation, GE_GAMMA};
pub use schedule::{linspace, Sampler, Schedule, NUM_TRAIN_TIMESTEPS};
pub use sde::{flow_sde_step, step_noise_seed, FlowSde, SdeDraw, SdeStep};
pub use unipc::{UniPc, UniPcConfig};

use fastvideo_request::{ResolvedRequest, SamplerKind};

/// Builds the sampler a request asked for, over its explicit schedule when it has one.
pub fn build(req: &ResolvedRequest) -> Box<dyn Sampler> {
    let (steps, shift) = (req.steps as usize, req.shift as f64);
    let unipc = UniPcConfig { flow_shift: shift, ..UniPcConfig::default() };
    match (req.sampler, &req.schedule) {
        (SamplerKind::Euler, None) => Box::new(FlowMatchEuler::new(steps, shift)),
        (SamplerKind::Euler, Some(base)) => Box::new(FlowMatchEuler::with_base_sigmas(base, shift)),
        (SamplerKind::Unipc, None) => Box::new(UniPc::new(unipc, steps)),
        (SamplerKind::Unipc, Some(base)) => Box::new(UniPc::with_base_sigmas(unipc, base.clone())),
        (SamplerKind::FlowSde, None) => Box::new(FlowSde::new(steps, shift, req.noise_level, &req.sde_steps, req.seed)),
        (SamplerKind::FlowSde, Some(base)) => {
            Box::new(FlowSde::with_base_sigmas(base, shift, req.noise_level, &req.sde_steps, req.seed))
        }
        (SamplerKind::EulerAncestral, Some(base)) => Box::new(EulerAncestral::new(base, shift, dmd::seeded(req.seed))),
        (SamplerKind::EulerAncestral, None) => {
            Box::new(EulerAncestral::over(FlowMatchEuler::new(steps, shift).schedule().clone(), dmd::seeded(req.seed)))
        }
        (SamplerKind::GradientEstimation, Some(base)) => {
            Box::new(GradientEstimation::over(FlowMatchEuler::with_base_sigmas(base, shift).schedule().clone()))
        }
        (SamplerKind::GradientEstimation, None) => {
            Box::new(GradientEstimation::over(FlowMatchEuler::new(steps, shift).schedule().clone()))
        }
        (SamplerKind::Dmd, Some(base)) => Box::new(Dmd::new(base, shift, req.seed)),
        // diffusers' FlowMatchLCMScheduler spaces steps as its Euler scheduler does.
        (SamplerKind::Dmd, None) => Box::new(Dmd::over(FlowMatchEuler::new(steps, shift).schedule().clone(), req.seed)),
        // The request resolves rCM's levels (`sampling.sigma_max`); the shift does not apply.
        (SamplerKind::Rcm, Some(levels)) => Box::new(Dmd::consistency_seeded(levels, req.seed)),
        // (A resolved request always carries rCM's levels; this is its default for `steps`.)
        (SamplerKind::Rcm, None) => {
            let levels = fastvideo_request::rcm_levels(req.steps, fastvideo_request::RCM_SIGMA_MAX)
                .unwrap_or_else(|_| vec![1.0; 1]);
            Box::new(Dmd::consistency_seeded(&levels, req.seed))
        }
    }
}
