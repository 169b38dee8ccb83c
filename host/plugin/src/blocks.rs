//! A block-interceptor plugin bound into the denoise loop as its [`BlockPolicy`]: one instance
//! per request; each block's input and output are lent to the plugin as borrowed handles for
//! the duration of one call, so nothing is copied. Its events go to its request's stream.

use std::sync::Arc;

use anyhow::Result;
use fastvideo_pipeline::{BlockAction, BlockPolicy, BlockPolicyState, PluginMeter, StepCtx};
use fastvideo_request::{OmniEvent, ResolvedRequest};
use tch::Tensor;

use crate::bindings::exports::fastvideo::plugin::block_interceptor::BlockAction as WitAction;
use crate::deploy::{Deployment, EnabledPlugin};
use crate::guider::step_context;
use crate::runtime::{Guest, PluginInstance, PluginRuntime};

/// A block-interceptor plugin as the loop's [`BlockPolicy`]. For an exact request a
/// distribution-altering one is not called and every block runs.
pub struct PluginBlockPolicy {
    runtime: Arc<PluginRuntime>,
    plugin: Arc<EnabledPlugin>,
    model_id: String,
}

impl PluginBlockPolicy {
    /// Binds `plugin`, which must be a block interceptor enabled in `deploy`; `model_id` goes into
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

/// What an exact request gets from a distribution-altering block plugin: every block runs.
struct Bypassed;

impl BlockPolicyState for Bypassed {
    fn begin(&mut self, _: &StepCtx, _: &str, _: usize) -> Result<()> {
        Ok(())
    }
    fn after_block(&mut self, _: &StepCtx, _: &str, _: usize, _: &Tensor, _: &Tensor) -> Result<BlockAction> {
        Ok(BlockAction::Proceed)
    }
    fn end(&mut self, _: &StepCtx, _: &str, _: &Tensor) -> Result<()> {
        Ok(())
    }
}

impl BlockPolicy for PluginBlockPolicy {
    fn init(&self, req: &ResolvedRequest, meter: &PluginMeter) -> Result<Box<dyn BlockPolicyState>> {
        if self.plugin.bypassed_for(req) {
            return Ok(Box::new(Bypassed));
        }
        let (inst, _) = self.runtime.start(&self.plugin, req, meter)?;
        Ok(Box::new(State { inst, model_id: self.model_id.clone(), request_id: req.request_id.clone() }))
    }
}

impl BlockPolicyState for State {
    fn begin(&mut self, step: &StepCtx, branch: &str, num_blocks: usize) -> Result<()> {
        let sc = step_context(step, Some(branch), &self.model_id);
        self.inst.call("begin-forward", |store, g| match g {
            Guest::BlockInterceptor(g) => g.call_begin_forward(store, &sc, num_blocks as u32),
            _ => unreachable!("loaded as a block interceptor"),
        })?;
        Ok(())
    }

    fn after_block(
        &mut self,
        step: &StepCtx,
        branch: &str,
        index: usize,
        input: &Tensor,
        output: &Tensor,
    ) -> Result<BlockAction> {
        let sc = step_context(step, Some(branch), &self.model_id);
        let result = self.inst.call_lending("after-block", [input, output], |store, g, [rin, rout]| match g {
            Guest::BlockInterceptor(g) => g.call_after_block(store, &sc, index as u32, rin, rout),
            _ => unreachable!("loaded as a block interceptor"),
        });
        Ok(match result? {
            WitAction::Proceed => BlockAction::Proceed,
            WitAction::SkipTo((to, hidden)) => {
                BlockAction::SkipTo(to as usize, self.inst.reclaim("after-block", hidden)?)
            }
        })
    }

    fn end(&mut self, step: &StepCtx, branch: &str, hidden: &Tensor) -> Result<()> {
        let sc = step_context(step, Some(branch), &self.model_id);
        let result = self.inst.call_lending("end-forward", [hidden], |store, g, [r]| match g {
            Guest::BlockInterceptor(g) => g.call_end_forward(store, &sc, r),
            _ => unreachable!("loaded as a block interceptor"),
        });
        result?;
        Ok(())
    }

    fn take_events(&mut self) -> Vec<OmniEvent> {
        self.inst.drain_stream_events(&self.request_id)
    }
}
