//! Flow-matching samplers. Each one is per-request state (UniPC keeps a history of model
//! outputs), built fresh by [`build`] and owned by the request's `LoopState`.
//!
//! Schedules are computed the way diffusers computes them — in float64, then rounded to float32 —
//! so timesteps and sigmas match the reference bit for bit; solver coefficients are computed in
//! float64 from those float32 sigmas.

mod euler;
mod schedule;
mod sde;
mod unipc;

pub use euler::FlowMatchEuler;
pub use schedule::{linspace, Sampler, Schedule, NUM_TRAIN_TIMESTEPS};
pub use sde::{flow_sde_step, step_noise_seed, FlowSde, SdeDraw, SdeStep};
pub use unipc::{UniPc, UniPcConfig};

use fastvideo_request::{ResolvedRequest, SamplerKind};

/// Builds the sampler a request asked for.
pub fn build(req: &ResolvedRequest) -> Box<dyn Sampler> {
    let (steps, shift) = (req.steps as usize, req.shift as f64);
    match req.sampler {
        SamplerKind::Euler => Box::new(FlowMatchEuler::new(steps, shift)),
        SamplerKind::Unipc => Box::new(UniPc::new(UniPcConfig { flow_shift: shift, ..UniPcConfig::default() }, steps)),
        SamplerKind::FlowSde => Box::new(FlowSde::new(steps, shift, req.noise_level, &req.sde_steps, req.seed)),
    }
}
