//! An expert-router plugin bound into the denoise loop as its [`ExpertRouting`] policy: one
//! instance per request, asked once per step which expert runs it. A router sees only the step
//! context and the request's expert parameters (no tensors), so it needs no grant but `log`.
//! For an exact request a distribution-altering router gives way to the built-in boundary rule.

use std::sync::Arc;

use anyhow::Result;
use fastvideo_pipeline::{BoundaryRouting, ExpertRouting, ExpertRoutingState, PluginMeter, Route, StepCtx};
use fastvideo_request::ResolvedRequest;

use crate::bindings::exports::fastvideo::plugin::expert_router::Experts;
use crate::deploy::{Deployment, EnabledPlugin};
use crate::guider::step_context;
use crate::runtime::{Guest, PluginInstance, PluginRuntime};

/// Wan's training timesteps: the built-in rule's scale, and the one routers are told about.
const NUM_TRAIN_TIMESTEPS: f32 = 1000.0;

/// A router plugin as the loop's [`ExpertRouting`].
pub struct PluginRouter {
    runtime: Arc<PluginRuntime>,
    plugin: Arc<EnabledPlugin>,
    model_id: String,
}

impl PluginRouter {
    /// Binds `plugin`, which must be an expert router enabled in `deploy`; `model_id` goes into
    /// every step context it sees.
    pub fn new(deploy: &Deployment, plugin: Arc<EnabledPlugin>, model_id: impl Into<String>) -> Self {
        Self { runtime: deploy.runtime.clone(), plugin, model_id: model_id.into() }
    }
}

struct State {
    inst: PluginInstance,
    model_id: String,
    experts: Experts,
}

impl ExpertRouting for PluginRouter {
    fn init(&self, req: &ResolvedRequest, count: u32, meter: &PluginMeter) -> Result<Box<dyn ExpertRoutingState>> {
        let builtin = BoundaryRouting { num_train_timesteps: NUM_TRAIN_TIMESTEPS };
        if self.plugin.bypassed_for(req) {
            return builtin.init(req, count, meter);
        }
        let Some(e) = req.experts else {
            anyhow::bail!("expert router `{}`: the request has no expert parameters", self.plugin.name());
        };
        let (inst, _) = self.runtime.start(&self.plugin, req, meter)?;
        let experts = Experts {
            count,
            boundary_ratio: e.boundary_ratio,
            guidance_scale_2: e.guidance_scale_2,
            switch_step: e.switch_step,
        };
        Ok(Box::new(State { inst, model_id: self.model_id.clone(), experts }))
    }
}

impl ExpertRoutingState for State {
    fn route(&mut self, step: &StepCtx) -> Result<Route> {
        let sc = step_context(step, None, &self.model_id);
        let experts = self.experts;
        let r = self.inst.call("route", |store, g| match g {
            Guest::ExpertRouter(g) => g.call_route(store, &sc, experts),
            _ => unreachable!("loaded as an expert router"),
        })?;
        if r.expert >= experts.count || !r.guidance_scale.is_finite() {
            self.inst.poison();
            let msg = format!(
                "routed to expert {} with guidance scale {} (the model has {} experts; the scale must be finite)",
                r.expert, r.guidance_scale, experts.count
            );
            return Err(self.inst.invalid("route", msg).into());
        }
        Ok(Route { expert: r.expert, guidance_scale: r.guidance_scale })
    }
}
