use std::any::Any;

use anyhow::{bail, Result};
use fastvideo_request::ResolvedRequest;
use tch::Tensor;

use crate::meter::PluginMeter;

/// Per-request state of a guidance policy (CFG-Zero*, APG and plugin guiders keep some; classic
/// CFG keeps none). Lives in the request's `LoopState`, never in the policy object.
pub struct GuidanceState(pub Box<dyn Any + Send>);

/// What a request's guidance needs: the branches to evaluate each step (the first is the
/// conditional one; `cond` and `uncond` are bound to the prompt and negative prompt) and the
/// policy's per-request state.
pub struct GuidancePlan {
    /// Branch names, conditional first; each must be bound to a conditioning value in the loop.
    pub branches: Vec<String>,
    /// The policy's state for this request, handed back on every `combine`.
    pub state: GuidanceState,
}

/// Where in the loop a combine happens (plugins see the same fields in their step context).
#[derive(Debug, Clone, Copy)]
pub struct StepCtx<'a> {
    /// The request being denoised.
    pub request: &'a ResolvedRequest,
    /// 0-based index of this step.
    pub step_index: u32,
    /// Steps in the request's schedule.
    pub num_steps: u32,
    /// The model time passed to the denoiser this step (on the 0..1000 training scale).
    pub timestep: f32,
    /// Noise level at this step.
    pub sigma: f32,
    /// Noise level after this step (0 after the last).
    pub sigma_next: f32,
    /// The expert that runs this step (0 for models with one denoiser; see
    /// [`ExpertRouting`](crate::ExpertRouting)).
    pub expert: u32,
    /// The guidance scale this step combines with: the request's, or the expert's when the
    /// route gives another (Wan 2.2's `guidance_scale_2`).
    pub guidance_scale: f32,
}

impl<'a> StepCtx<'a> {
    /// The next step of `sampler` for `request` (one denoiser, one guidance scale); `None` once
    /// every step is taken.
    pub fn of_sampler(
        request: &'a ResolvedRequest,
        sampler: &dyn crate::sampler::Sampler,
        guidance_scale: f32,
    ) -> Option<Self> {
        let (timesteps, sigmas) = (sampler.timesteps(), sampler.sigmas());
        let i = sampler.step_index();
        (i < timesteps.len()).then(|| StepCtx {
            request,
            step_index: i as u32,
            num_steps: timesteps.len() as u32,
            timestep: timesteps[i],
            sigma: sigmas[i],
            sigma_next: sigmas.get(i + 1).copied().unwrap_or(0.0),
            expert: 0,
            guidance_scale,
        })
    }
}

/// How the loop turns branch predictions into one. The policy is bound when the pipeline is
/// built and shared by all requests; anything that changes per request is in [`GuidanceState`].
pub trait Guidance: Send + Sync {
    /// Called once per request before the first step; an error fails that request only.
    fn init(&self, req: &ResolvedRequest, meter: &PluginMeter) -> Result<GuidancePlan>;
    /// `preds[i]` is the prediction of `plan.branches[i]`.
    fn combine(&self, ctx: &StepCtx, preds: &[Tensor], state: &mut GuidanceState) -> Result<Tensor>;
}

/// Classifier-free guidance: `uncond + s * (cond - uncond)`, skipped (one branch) when s <= 1.
pub struct ClassicCfg;

impl Guidance for ClassicCfg {
    fn init(&self, req: &ResolvedRequest, _meter: &PluginMeter) -> Result<GuidancePlan> {
        let branches = if req.does_cfg() { vec!["cond", "uncond"] } else { vec!["cond"] };
        Ok(GuidancePlan {
            branches: branches.into_iter().map(String::from).collect(),
            state: GuidanceState(Box::new(())),
        })
    }
    fn combine(&self, ctx: &StepCtx, preds: &[Tensor], _state: &mut GuidanceState) -> Result<Tensor> {
        match preds {
            [cond] => Ok(cond.shallow_clone()),
            [cond, uncond] => Ok(uncond + (cond - uncond) * ctx.guidance_scale as f64),
            _ => bail!("classic CFG takes 1 or 2 branch predictions, got {}", preds.len()),
        }
    }
}
