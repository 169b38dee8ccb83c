//! Expert routing (DESIGN.md: a policy bound at build time, with per-request state): which of a
//! model's denoisers runs a step, and with what guidance scale. A two-expert model's own rule is
//! its family's (Wan 2.2 A14B's boundary rule lives in `fastvideo-wan`); a Wasm plugin may
//! supply another (`expert-router`, docs/plugins.md), which [`OrModelRule`] puts in front of it.

use std::sync::Arc;

use anyhow::Result;
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

    /// Whether this policy gives way to the model's own rule for `req` (a distribution-altering
    /// plugin on an exact request); then [`OrModelRule`] runs the model's rule instead.
    fn gives_way(&self, _req: &ResolvedRequest) -> bool {
        false
    }
}

/// A request's routing state. `route` is asked once per step, in order, before the step runs
/// (the scheduler batches by it, so it must not depend on anything but the step and the state).
pub trait ExpertRoutingState: Send {
    /// The route of the step `step` describes (`step.expert` and `step.guidance_scale` are not
    /// yet set: they are this call's answer).
    fn route(&mut self, step: &StepCtx) -> Result<Route>;
}

/// A deploy's routing policy in front of the model's own rule: the policy for every request it
/// does not give way on, the model's rule for the rest (and for all, with no policy).
pub struct OrModelRule {
    /// The deploy's policy (a plugin's), if one is bound.
    pub policy: Option<Arc<dyn ExpertRouting>>,
    /// The model family's own rule.
    pub model: Arc<dyn ExpertRouting>,
}

impl ExpertRouting for OrModelRule {
    fn init(&self, req: &ResolvedRequest, experts: u32, meter: &PluginMeter) -> Result<Box<dyn ExpertRoutingState>> {
        match &self.policy {
            Some(p) if !p.gives_way(req) => p.init(req, experts, meter),
            _ => self.model.init(req, experts, meter),
        }
    }
}
