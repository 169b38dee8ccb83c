//! Admission against the served precision preset: a server never changes a request's numerics
//! silently. A request that names a preset (`diffusion.precision`) gets exactly it or a 400, and
//! an `exact` request is refused by a server whose jobs take a lossy path (`fp8_linears`,
//! `int8_attention`).

use fastvideo_request::{RequestError, ResolvedRequest};
use fastvideo_torch::Precision;

/// The check for a server running `served` (resolved, not `auto`) whose jobs take the lossy
/// paths `lossy` (option names, as `fastvideo_torch::lossy_paths` gives them).
pub fn precision_check(
    served: Precision,
    lossy: Vec<&'static str>,
) -> impl Fn(&ResolvedRequest) -> Result<(), RequestError> + Send + Sync {
    let beyond = fastvideo_torch::beyond_preset(served, &lossy).join(", ");
    let lossy = lossy.join(", ");
    move |r| {
        if let Some(asked) = &r.precision {
            let asked: Precision = asked.parse().map_err(|e| RequestError::new("diffusion.precision", e))?;
            if !beyond.is_empty() {
                return Err(RequestError::new(
                    "diffusion.precision",
                    format!("this server runs {beyond} on top of `{served}`, which no preset includes"),
                ));
            }
            if asked != served {
                return Err(RequestError::new(
                    "diffusion.precision",
                    format!(
                        "this server runs precision `{served}`, not `{asked}` (it is chosen when the server starts)"
                    ),
                ));
            }
        }
        if r.exact && !lossy.is_empty() {
            return Err(RequestError::new(
                "exact",
                format!("this server runs {lossy}, a lossy path; exact requests need a server without it"),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fastvideo_request::{ModelLimits, OmniRequest};

    fn resolved(json: serde_json::Value) -> ResolvedRequest {
        let req: OmniRequest = serde_json::from_value(json).unwrap();
        req.resolve(&ModelLimits::example(), || 1).unwrap()
    }

    #[test]
    fn a_named_preset_must_be_the_served_one() {
        let check = precision_check(Precision::Bf16, vec![]);
        let base = serde_json::json!({"request_id": "r", "task": "t2v", "inputs": [{"type": "text", "text": "a"}]});
        assert!(check(&resolved(base.clone())).is_ok(), "no preset named: the server's");
        let mut same = base.clone();
        same["diffusion"] = serde_json::json!({"precision": "bf16"});
        assert!(check(&resolved(same)).is_ok());
        let mut other = base.clone();
        other["diffusion"] = serde_json::json!({"precision": "fast"});
        let e = check(&resolved(other)).unwrap_err();
        assert_eq!(e.field, "diffusion.precision");
        assert!(e.rule.contains("`bf16`"), "{}", e.rule);
        let mut bad = base;
        bad["diffusion"] = serde_json::json!({"precision": "fp4"});
        assert_eq!(check(&resolved(bad)).unwrap_err().field, "diffusion.precision");
    }

    #[test]
    fn exact_requests_are_refused_by_a_lossy_server_only() {
        let exact = resolved(serde_json::json!({"request_id": "r", "task": "t2v", "exact": true,
            "inputs": [{"type": "text", "text": "a"}]}));
        assert!(precision_check(Precision::Bf16, vec![])(&exact).is_ok());
        assert!(precision_check(Precision::Exact, vec![])(&exact).is_ok());
        // A `fast` server whose jobs take no lossy path (a CPU) serves exact requests.
        assert!(precision_check(Precision::Fast, vec![])(&exact).is_ok());
        assert_eq!(precision_check(Precision::Bf16, vec!["fp8_linears"])(&exact).unwrap_err().field, "exact");
        // A preset named on such a server is refused too: FP8 linears are in none.
        let named = resolved(serde_json::json!({"request_id": "r", "task": "t2v",
            "diffusion": {"precision": "bf16"}, "inputs": [{"type": "text", "text": "a"}]}));
        assert_eq!(
            precision_check(Precision::Bf16, vec!["fp8_linears"])(&named).unwrap_err().field,
            "diffusion.precision"
        );
        // 8-bit attention: a lossy path either way; beyond the preset unless `fast` includes it.
        let e = precision_check(Precision::Bf16, vec!["int8_attention"])(&exact).unwrap_err();
        assert!(e.field == "exact" && e.rule.contains("int8_attention"), "{}", e.rule);
        assert_eq!(
            precision_check(Precision::Bf16, vec!["int8_attention"])(&named).unwrap_err().field,
            "diffusion.precision"
        );
        let fast = resolved(serde_json::json!({"request_id": "r", "task": "t2v",
            "diffusion": {"precision": "fast"}, "inputs": [{"type": "text", "text": "a"}]}));
        // `fast` includes both recipes (e4m3 P·V for generation models, f16 for world models);
        // with FP8 linears on top it is no preset.
        for recipe in [fastvideo_torch::Int8Attention::Fp8Pv, fastvideo_torch::Int8Attention::F16Pv] {
            assert!(precision_check(Precision::Fast, vec![recipe.name()])(&fast).is_ok(), "{recipe:?}");
            let e = precision_check(Precision::Fast, vec![recipe.name(), "fp8_linears"])(&fast).unwrap_err();
            assert!(e.rule.contains("fp8_linears") && !e.rule.contains(recipe.name()), "{}", e.rule);
        }
    }
}
