//! A step-interceptor plugin bound into the denoise loop as its [`StepPolicy`]: one instance per
//! request. Before a step it may supply the step's model output (the forwards are skipped: how
//! TaylorSeer-style step caches work); after the step it sees the output the sampler used.

use std::sync::Arc;

use anyhow::Result;
use fastvideo_pipeline::{PluginMeter, StepCtx, StepPolicy, StepPolicyState};
use fastvideo_request::{OmniEvent, ResolvedRequest};
use tch::Tensor;

use crate::deploy::{Deployment, EnabledPlugin};
use crate::guider::step_context;
use crate::runtime::{Guest, PluginInstance, PluginRuntime};

/// A step-interceptor plugin as the loop's [`StepPolicy`]. For an exact request a
/// distribution-altering one is not called and every step is computed.
pub struct PluginStepPolicy {
    runtime: Arc<PluginRuntime>,
    plugin: Arc<EnabledPlugin>,
    model_id: String,
}

impl PluginStepPolicy {
    /// Binds `plugin`, which must be a step interceptor enabled in `deploy`; `model_id` goes into
    /// every step context it sees.
    pub fn new(deploy: &Deployment, plugin: Arc<EnabledPlugin>, model_id: impl Into<String>) -> Self {
        Self { runtime: deploy.runtime.clone(), plugin, model_id: model_id.into() }
    }
}

struct State {
    inst: PluginInstance,
    model_id: String,
    request_id: String,
}

/// What an exact request gets from a distribution-altering step plugin: every step computed.
struct Bypassed;

impl StepPolicyState for Bypassed {
    fn before_step(&mut self, _: &StepCtx, _: &Tensor) -> Result<Option<Tensor>> {
        Ok(None)
    }
    fn after_step(&mut self, _: &StepCtx, _: &Tensor) -> Result<()> {
        Ok(())
    }
}

impl StepPolicy for PluginStepPolicy {
    fn init(&self, req: &ResolvedRequest, meter: &PluginMeter) -> Result<Box<dyn StepPolicyState>> {
        if self.plugin.bypassed_for(req) {
            return Ok(Box::new(Bypassed));
        }
        let (inst, _) = self.runtime.start(&self.plugin, req, meter)?;
        Ok(Box::new(State { inst, model_id: self.model_id.clone(), request_id: req.request_id.clone() }))
    }
}

impl StepPolicyState for State {
    fn before_step(&mut self, step: &StepCtx, latents: &Tensor) -> Result<Option<Tensor>> {
        let sc = step_context(step, None, &self.model_id);
        let supplied = self.inst.call_lending("before-step", [latents], |store, g, [r]| match g {
            Guest::StepInterceptor(g) => g.call_before_step(store, &sc, r),
            _ => unreachable!("loaded as a step interceptor"),
        })?;
        match supplied {
            None => Ok(None),
            Some(out) => {
                let t = self.inst.reclaim("before-step", out)?;
                if t.size() != latents.size() {
                    self.inst.poison();
                    let msg =
                        format!("supplied an output of shape {:?}; the latents have {:?}", t.size(), latents.size());
                    return Err(self.inst.invalid("before-step", msg).into());
                }
                Ok(Some(t))
            }
        }
    }

    fn after_step(&mut self, step: &StepCtx, output: &Tensor) -> Result<()> {
        let sc = step_context(step, None, &self.model_id);
        Ok(self.inst.call_lending("after-step", [output], |store, g, [r]| match g {
            Guest::StepInterceptor(g) => g.call_after_step(store, &sc, r),
            _ => unreachable!("loaded as a step interceptor"),
        })?)
    }

    fn take_events(&mut self) -> Vec<OmniEvent> {
        self.inst.drain_stream_events(&self.request_id)
    }
}
