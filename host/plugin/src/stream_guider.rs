//! A stream-guider plugin bound into a multi-stream denoise loop (LTX-2's video and audio) as
//! its [`StreamGuidance`]: one instance per request, every stream's latents and branch
//! predictions passed as handles each step. For an exact request a distribution-altering
//! stream guider gives way to the model's own rule.

use std::sync::Arc;

use anyhow::Result;
use fastvideo_pipeline::{
    GuidancePlan, GuidanceState, PluginMeter, StepCtx, StreamGuidance, StreamPreds, STREAM_BRANCHES,
};
use fastvideo_request::ResolvedRequest;
use tch::Tensor;

use crate::bindings::exports::fastvideo::plugin::stream_guider::StreamPreds as WitStream;
use crate::deploy::{Deployment, EnabledPlugin};
use crate::guider::step_context;
use crate::runtime::{Guest, PluginInstance, PluginRuntime};

/// A stream-guider plugin as a multi-stream loop's [`StreamGuidance`].
pub struct PluginStreamGuider {
    runtime: Arc<PluginRuntime>,
    plugin: Arc<EnabledPlugin>,
    model_id: String,
}

impl PluginStreamGuider {
    /// Binds `plugin`, which must be a stream guider enabled in `deploy`; `model_id` goes into
    /// every step context it sees.
    pub fn new(deploy: &Deployment, plugin: Arc<EnabledPlugin>, model_id: impl Into<String>) -> Self {
        Self { runtime: deploy.runtime.clone(), plugin, model_id: model_id.into() }
    }
}

impl StreamGuidance for PluginStreamGuider {
    fn gives_way(&self, req: &ResolvedRequest) -> bool {
        self.plugin.bypassed_for(req)
    }

    fn init(&self, req: &ResolvedRequest, streams: &[&str], meter: &PluginMeter) -> Result<GuidancePlan> {
        let names: Vec<String> = streams.iter().map(|s| s.to_string()).collect();
        let (inst, branches) = self.runtime.start_streams(&self.plugin, req, meter, &names)?;
        if branches.is_empty() {
            return Err(inst.invalid("init", "declared no branches".into()).into());
        }
        if let Some(b) = branches.iter().find(|b| !STREAM_BRANCHES.contains(&b.as_str())) {
            let msg =
                format!("declared the branch `{b}`; a stream guider's branches are {}", STREAM_BRANCHES.join(", "));
            return Err(inst.invalid("init", msg).into());
        }
        Ok(GuidancePlan { branches, state: GuidanceState(Box::new(inst)) })
    }

    fn combine(&self, ctx: &StepCtx, streams: &[StreamPreds], state: &mut GuidanceState) -> Result<Vec<Tensor>> {
        let inst = state
            .0
            .downcast_mut::<PluginInstance>()
            .ok_or_else(|| anyhow::anyhow!("stream guider state is not a plugin instance"))?;
        let mut wit = Vec::with_capacity(streams.len());
        for s in streams {
            let mut push =
                |t: &Tensor| inst.state().push(t.shallow_clone()).map_err(|e| inst.invalid("combine", e.to_string()));
            let latents = push(s.latents)?;
            let preds = s.preds.iter().map(&mut push).collect::<Result<Vec<_>, _>>()?;
            wit.push(WitStream { name: s.name.to_string(), latents, preds });
        }
        let sc = step_context(ctx, None, &self.model_id);
        let out = inst.call("combine", |store, g| match g {
            Guest::StreamGuider(g) => g.call_combine(store, &sc, &wit),
            _ => unreachable!("loaded as a stream guider"),
        })?;
        if out.len() != streams.len() {
            inst.poison();
            let msg = format!("returned {} tensors for {} streams", out.len(), streams.len());
            return Err(inst.invalid("combine", msg).into());
        }
        let mut guided = Vec::with_capacity(out.len());
        for (h, s) in out.into_iter().zip(streams) {
            let t = inst.state().take(h).map_err(|e| inst.invalid("combine", e.to_string()))?;
            if t.size() != s.latents.size() {
                inst.poison();
                let msg = format!(
                    "returned a tensor of shape {:?} for stream `{}` of {:?}",
                    t.size(),
                    s.name,
                    s.latents.size()
                );
                return Err(inst.invalid("combine", msg).into());
            }
            guided.push(t);
        }
        Ok(guided)
    }
}
