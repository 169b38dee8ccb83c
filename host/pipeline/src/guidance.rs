use std::any::Any;

use anyhow::{ensure, Result};
use fastvideo_request::ResolvedRequest;
use tch::Tensor;

/// Per-request state of a guidance policy (CFG-Zero*, APG and friends keep some; classic CFG
/// keeps none). Lives in the request's `LoopState`, never in the policy object.
pub struct GuidanceState(pub Box<dyn Any + Send>);

/// How the loop turns branch predictions into one. The policy is bound when the pipeline is
/// built and shared by all requests; anything that changes per request is in [`GuidanceState`].
pub trait Guidance: Send + Sync {
    /// The branches this request needs evaluated, in order. The first is the conditional one.
    fn branches(&self, req: &ResolvedRequest) -> Vec<&'static str>;
    fn init_state(&self, req: &ResolvedRequest) -> GuidanceState;
    /// `preds[i]` is the prediction of `branches(req)[i]`.
    fn combine(&self, req: &ResolvedRequest, preds: &[Tensor], state: &mut GuidanceState) -> Result<Tensor>;
}

/// Classifier-free guidance: `uncond + s * (cond - uncond)`, skipped (one branch) when s <= 1.
pub struct ClassicCfg;

impl Guidance for ClassicCfg {
    fn branches(&self, req: &ResolvedRequest) -> Vec<&'static str> {
        if req.does_cfg() {
            vec!["cond", "uncond"]
        } else {
            vec!["cond"]
        }
    }
    fn init_state(&self, _req: &ResolvedRequest) -> GuidanceState {
        GuidanceState(Box::new(()))
    }
    fn combine(&self, req: &ResolvedRequest, preds: &[Tensor], _state: &mut GuidanceState) -> Result<Tensor> {
        match preds {
            [cond] => Ok(cond.shallow_clone()),
            [cond, uncond] => Ok(uncond + (cond - uncond) * req.guidance_scale as f64),
            _ => {
                ensure!(false, "classic CFG takes 1 or 2 branch predictions, got {}", preds.len());
                unreachable!()
            }
        }
    }
}
