//! Two chained `KSamplerAdvanced` nodes — the first runs steps `0..k` of the schedule and keeps
//! its leftover noise, the second runs the rest from that latent without adding noise — are one
//! schedule split at step `k`. That is how ComfyUI's Wan 2.2 templates run the high-noise and the
//! low-noise models. On two models they become one two-expert request (the first sampler's model
//! is the high-noise expert) that switches at step `k` with each sampler's `cfg`; on one model
//! with one `cfg` they are one plain request. LoRAs on one model bind to that expert.

use serde_json::Value;

use fastvideo_request::LoraExpert;

use super::{number, text, Lowering};
use crate::lower::{LoraPlan, ModelFile};
use crate::translate::GraphNode;
use crate::CompileError;

/// What a chain adds to its run.
pub(super) struct Chain {
    /// Two models: the step the second (low-noise) one takes over, and its guidance scale.
    pub(super) experts: Option<(u32, f32)>,
}

fn flag(n: &GraphNode, k: &str) -> Option<bool> {
    n.params.get(k).and_then(Value::as_bool)
}

fn step(n: &GraphNode, k: &str, default: u64) -> u64 {
    n.params.get(k).and_then(Value::as_u64).unwrap_or(default)
}

/// The LoRAs of two models (or two stages) as one request's: one loaded on both (same file, same
/// strength) binds to both, the others to their own — `(first, second)` name the binding (a
/// chain's high- and low-noise experts; a two-stage recipe's `base` and `refine` loops).
pub(super) fn bind_per_model(
    first: &mut Vec<LoraPlan>,
    second: Vec<LoraPlan>,
    (one, two): (fastvideo_request::LoraExpert, fastvideo_request::LoraExpert),
) {
    let same = |a: &LoraPlan, b: &LoraPlan| a.file == b.file && a.strength == b.strength;
    for l in first.iter_mut() {
        if !second.iter().any(|s| same(s, l)) {
            l.expert = Some(one);
        }
    }
    let shared: Vec<LoraPlan> = first.clone();
    for mut l in second.into_iter().filter(|s| !shared.iter().any(|f| same(f, s))) {
        l.expert = Some(two);
        first.push(l);
    }
}

impl<'a> Lowering<'a> {
    /// Checks that `first` feeds `second` as one split schedule, and reads both samplers'
    /// models into `files`, `shift` and `loras`.
    pub(super) fn chain(
        &self,
        first: &GraphNode,
        second: &GraphNode,
        files: &mut Vec<ModelFile>,
        shift: &mut Option<f32>,
        loras: &mut Vec<LoraPlan>,
    ) -> Result<Chain, CompileError> {
        let at = |n: &GraphNode, m: String| Err(CompileError::node(&n.origin, m));
        if first.stage != "sample" || self.input(first, "latent").is_some_and(|(p, _)| p.stage.starts_with("sample")) {
            return at(first, "a chain of more than two samplers, or of a custom sampler, is not supported".into());
        }
        let steps = number(first, "steps")? as u64;
        let k = step(first, "end_step", u64::MAX);
        for (n, key, want) in [
            (first, "add_noise", true),
            (first, "return_noisy", true),
            (second, "add_noise", false),
            (second, "return_noisy", false),
        ] {
            if flag(n, key).is_some_and(|v| v != want) {
                let role = if std::ptr::eq(n, first) { "the first" } else { "the second" };
                return at(
                    n,
                    format!("`{key}: {}` in {role} sampler of a chain: a split schedule needs {want}", !want),
                );
            }
        }
        if step(first, "start_step", 0) != 0 || k == 0 || k >= steps {
            return at(
                first,
                format!(
                    "steps {}..{k} of {steps}: the first sampler of a chain runs 0..k with k inside the schedule",
                    step(first, "start_step", 0)
                ),
            );
        }
        if number(second, "steps")? as u64 != steps
            || step(second, "start_step", 0) != k
            || step(second, "end_step", u64::MAX) < steps
        {
            return at(
                second,
                format!(
                    "steps {}..{} of {}: the second sampler of a chain runs from the first's end ({k}) to the end of the same {steps}-step schedule",
                    step(second, "start_step", 0),
                    step(second, "end_step", u64::MAX),
                    number(second, "steps")?
                ),
            );
        }
        for key in ["sampler", "scheduler"] {
            if text(first, key)? != text(second, key)? {
                return at(
                    second,
                    format!("`{key}` differs from node {}'s: a split schedule runs one solver", first.origin),
                );
            }
        }
        // The models: each sampler's, with its shift and LoRAs.
        let (mut shift_2, mut loras_2) = (None, Vec::new());
        self.model(first, "model", files, shift, loras)?;
        let before = files.len();
        self.model(second, "model", files, &mut shift_2, &mut loras_2)?;
        let two_models = files.len() > before;
        if shift_2 != *shift {
            return at(
                second,
                format!(
                    "shift {shift_2:?} differs from node {}'s {shift:?}: one schedule takes one shift",
                    first.origin
                ),
            );
        }
        if !two_models && loras_2 != *loras {
            let node = loras_2.first().or(loras.first()).map_or(second.origin.as_str(), |l| l.node.as_str());
            return Err(CompileError::node(node, "the two samplers run one model with different LoRAs"));
        }
        if two_models {
            bind_per_model(loras, loras_2, (LoraExpert::HighNoise, LoraExpert::LowNoise));
        }
        for param in ["positive", "negative"] {
            let mut refs = Vec::new();
            let a = self.conditioning(first, param, files, &mut refs)?.0;
            let b = self.conditioning(second, param, files, &mut refs)?.0;
            if let Some(r) = refs.first() {
                let msg = format!("conditions on node {}'s picture: chained samplers run text to video only", r.node);
                return Err(CompileError::node(&first.origin, msg));
            }
            if a != b {
                return at(
                    second,
                    format!("`{param}` differs from node {}'s: a split schedule runs one prompt", first.origin),
                );
            }
        }
        let (cfg, cfg_2) = (number(first, "cfg")? as f32, number(second, "cfg")? as f32);
        if !two_models && cfg != cfg_2 {
            return at(second, format!("cfg {cfg_2} differs from node {}'s {cfg} on the same model", first.origin));
        }
        Ok(Chain { experts: two_models.then_some((k as u32, cfg_2)) })
    }
}
