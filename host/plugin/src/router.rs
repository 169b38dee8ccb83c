//! An expert-router plugin bound into the denoise loop as its [`ExpertRouting`] policy: one
//! instance per request, asked once per step which expert runs it. A router sees only the step
//! context and the request's expert knobs (no tensors), so it needs no grant but `log`. For an
//! exact request a distribution-altering router gives way to the model's own rule.
//!
//! The WIT `experts` record a router sees names Wan 2.2's knobs (`boundary_ratio`,
//! `guidance_scale_2`, `switch_step`); they are read here from the request's resolved knobs by
//! those names, so a model whose schema declares them can be routed.

use std::sync::Arc;

use anyhow::Result;
use fastvideo_pipeline::{ExpertRouting, ExpertRoutingState, PluginMeter, Route, StepCtx};
use fastvideo_request::ResolvedRequest;

use crate::bindings::exports::fastvideo::plugin::expert_router::Experts;
use crate::deploy::{Deployment, EnabledPlugin};
use crate::guider::step_context;
use crate::runtime::{Guest, PluginInstance, PluginRuntime};

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
        if self.gives_way(req) {
            anyhow::bail!("expert router `{}` gives way to the model's rule for this request", self.plugin.name());
        }
        let knobs = (req.knob_f64("boundary_ratio"), req.knob_f64("guidance_scale_2"));
        let (Some(boundary_ratio), Some(guidance_scale_2)) = knobs else {
            anyhow::bail!("expert router `{}`: the request has no expert parameters", self.plugin.name());
        };
        let (inst, _) = self.runtime.start(&self.plugin, req, meter)?;
        let experts = Experts {
            count,
            boundary_ratio: boundary_ratio as f32,
            guidance_scale_2: guidance_scale_2 as f32,
            switch_step: req.knob_u32("switch_step"),
        };
        Ok(Box::new(State { inst, model_id: self.model_id.clone(), experts }))
    }

    fn gives_way(&self, req: &ResolvedRequest) -> bool {
        self.plugin.bypassed_for(req)
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
