//! A guider plugin bound into the denoise loop as its [`Guidance`] policy: one instance per
//! request (its state lives in the request's loop state), branch tensors passed as handles.

use std::sync::Arc;

use anyhow::Result;
use fastvideo_pipeline::{ClassicCfg, Guidance, GuidancePlan, GuidanceState, PluginMeter, StepCtx};
use fastvideo_request::ResolvedRequest;
use tch::Tensor;

use crate::bindings::fastvideo::plugin::types::StepContext;
use crate::deploy::{Deployment, EnabledPlugin};
use crate::runtime::{Guest, PluginInstance, PluginRuntime};

/// A guider plugin as the loop's [`Guidance`]: it names the branches to run and combines their
/// predictions. For an exact request a distribution-altering guider gives way to built-in CFG.
pub struct PluginGuider {
    runtime: Arc<PluginRuntime>,
    plugin: Arc<EnabledPlugin>,
    model_id: String,
}

impl PluginGuider {
    /// Binds `plugin`, which must be a guider enabled in `deploy`; `model_id` goes into every step
    /// context it sees.
    pub fn new(deploy: &Deployment, plugin: Arc<EnabledPlugin>, model_id: impl Into<String>) -> Self {
        Self { runtime: deploy.runtime.clone(), plugin, model_id: model_id.into() }
    }
}

/// The WIT step context of a loop step.
pub fn step_context(ctx: &StepCtx, branch: Option<&str>, model_id: &str) -> StepContext {
    StepContext {
        request_id: ctx.request.request_id.clone(),
        step_index: ctx.step_index,
        num_steps: ctx.num_steps,
        timestep: ctx.timestep,
        sigma: ctx.sigma,
        sigma_next: ctx.sigma_next,
        guidance_scale: ctx.guidance_scale,
        branch: branch.map(String::from),
        model_id: model_id.to_string(),
    }
}

impl Guidance for PluginGuider {
    fn init(&self, req: &ResolvedRequest, meter: &PluginMeter) -> Result<GuidancePlan> {
        if self.plugin.bypassed_for(req) {
            return ClassicCfg.init(req, meter);
        }
        let (inst, branches) = self.runtime.start(&self.plugin, req, meter)?;
        if branches.is_empty() {
            return Err(inst.invalid("init", "declared no branches".into()).into());
        }
        Ok(GuidancePlan { branches, state: GuidanceState(Box::new(inst)) })
    }

    fn combine(&self, ctx: &StepCtx, preds: &[Tensor], state: &mut GuidanceState) -> Result<Tensor> {
        // No instance: the request is exact and this guider alters the distribution.
        let Some(inst) = state.0.downcast_mut::<PluginInstance>() else {
            return ClassicCfg.combine(ctx, preds, state);
        };
        let mut handles = Vec::with_capacity(preds.len());
        for p in preds {
            let h = inst.state().push(p.shallow_clone()).map_err(|e| inst.invalid("combine", e.to_string()))?;
            handles.push(h);
        }
        let sc = step_context(ctx, None, &self.model_id);
        let out = inst.call("combine", |store, g| match g {
            Guest::Guider(g) => g.call_combine(store, &sc, &handles),
            _ => unreachable!("loaded as a guider"),
        })?;
        let t = inst.state().take(out).map_err(|e| inst.invalid("combine", e.to_string()))?;
        if t.size() != preds[0].size() {
            inst.poison();
            let msg = format!("returned a tensor of shape {:?}; the branches have {:?}", t.size(), preds[0].size());
            return Err(inst.invalid("combine", msg).into());
        }
        Ok(t)
    }
}
