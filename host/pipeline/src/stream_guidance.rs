//! Guidance of a model that denoises several streams in one loop (LTX-2: video and audio, which
//! see each other in every block). A [`Guidance`](crate::Guidance) policy combines one tensor
//! per branch; a [`StreamGuidance`] gets every stream's latents and branch predictions at once,
//! so each stream may have its own scales and the combination may work on clean-sample
//! estimates. The model's own rule is the default; a deploy's stream-guider plugin replaces it.

use anyhow::Result;
use fastvideo_request::ResolvedRequest;
use tch::Tensor;

use crate::guidance::{GuidancePlan, GuidanceState, StepCtx};
use crate::meter::PluginMeter;

/// One stream at one step.
pub struct StreamPreds<'a> {
    /// The stream's name (`video`, `audio`).
    pub name: &'a str,
    /// Its latents before the step.
    pub latents: &'a Tensor,
    /// `preds[i]`: the model's output for branch `i` of the plan.
    pub preds: &'a [Tensor],
}

/// The branch names a stream guidance may ask for.
pub const STREAM_BRANCHES: [&str; 4] = ["cond", "uncond", "perturbed", "isolated"];

/// How a multi-stream loop turns branch predictions into each stream's guided output. Bound
/// when the pipeline is built and shared by all requests; per-request state is in the plan.
pub trait StreamGuidance: Send + Sync {
    /// Whether the model's own rule runs this request instead (an exact request and a guider
    /// that alters the distribution).
    fn gives_way(&self, _req: &ResolvedRequest) -> bool {
        false
    }
    /// Called once per request before the first step with the model's stream names; the plan's
    /// branches are from [`STREAM_BRANCHES`], conditional first. An error fails that request
    /// only.
    fn init(&self, req: &ResolvedRequest, streams: &[&str], meter: &PluginMeter) -> Result<GuidancePlan>;
    /// Each stream's guided output, in the order of `streams`.
    fn combine(&self, ctx: &StepCtx, streams: &[StreamPreds], state: &mut GuidanceState) -> Result<Vec<Tensor>>;
}
