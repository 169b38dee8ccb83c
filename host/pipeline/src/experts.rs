//! Expert routing (DESIGN.md: a policy bound at build time, with per-request state): which of a
//! model's denoisers runs a step, and with what guidance scale. Wan 2.2 A14B's rule is
//! [`BoundaryRouting`]; a Wasm plugin may supply another (`expert-router`, docs/plugins.md).

use anyhow::{ensure, Result};
use fastvideo_request::ResolvedRequest;

use crate::{PluginMeter, StepCtx};

/// Where a step goes: the expert's index (0: the model's `transformer`, the high-noise expert
/// of Wan 2.2; 1: `transformer_2`) and the guidance scale its branches combine with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Route {
    /// Index of the denoiser expert that runs the step.
    pub expert: u32,
    /// The classifier-free guidance scale for the step.
    pub guidance_scale: f32,
}

/// Chooses the expert of every step. Bound when the pipeline is built and shared by all
/// requests; anything that changes per request is in the state `init` hands out.
pub trait ExpertRouting: Send + Sync {
    /// Called once per request before its first step, with the number of experts the model has;
    /// an error fails that request only.
    fn init(&self, req: &ResolvedRequest, experts: u32, meter: &PluginMeter) -> Result<Box<dyn ExpertRoutingState>>;
}

/// A request's routing state. `route` is asked once per step, in order, before the step runs
/// (the scheduler batches by it, so it must not depend on anything but the step and the state).
pub trait ExpertRoutingState: Send {
    /// The route of the step `step` describes (`step.expert` and `step.guidance_scale` are not
    /// yet set: they are this call's answer).
    fn route(&mut self, step: &StepCtx) -> Result<Route>;
}

/// Wan 2.2's rule (diffusers' `WanPipeline`): the high-noise expert while the step's timestep is
/// at or above `boundary_ratio × num_train_timesteps`, then the low-noise expert with
/// `guidance_scale_2`. Both come from the request (its own or the model's defaults). A request's
/// `switch_step` replaces the timestep test with a step index (ComfyUI's chained samplers).
pub struct BoundaryRouting {
    /// The scheduler's training timesteps (1000 for Wan).
    pub num_train_timesteps: f32,
}

struct BoundaryState {
    boundary: f32,
    switch_step: Option<u32>,
    guidance_scale: f32,
    guidance_scale_2: f32,
}

impl ExpertRouting for BoundaryRouting {
    fn init(&self, req: &ResolvedRequest, _experts: u32, _meter: &PluginMeter) -> Result<Box<dyn ExpertRoutingState>> {
        let e = req.experts.as_ref();
        ensure!(e.is_some(), "expert routing: the request has no expert parameters (is this a two-expert model?)");
        let e = e.unwrap();
        Ok(Box::new(BoundaryState {
            boundary: e.boundary_ratio * self.num_train_timesteps,
            switch_step: e.switch_step,
            guidance_scale: req.guidance_scale,
            guidance_scale_2: e.guidance_scale_2,
        }))
    }
}

impl ExpertRoutingState for BoundaryState {
    fn route(&mut self, step: &StepCtx) -> Result<Route> {
        let high = match self.switch_step {
            Some(s) => step.step_index < s,
            None => step.timestep >= self.boundary,
        };
        Ok(if high {
            Route { expert: 0, guidance_scale: self.guidance_scale }
        } else {
            Route { expert: 1, guidance_scale: self.guidance_scale_2 }
        })
    }
}
