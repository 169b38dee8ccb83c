//! CFG-Zero* (Fan et al., 2025): guidance around a rescaled unconditional prediction,
//! `u·α + s·(c − u·α)` with `α = ⟨c, u⟩ / ‖u‖²` per sample, and the first `zero_init_steps`
//! steps output zero velocity. All arithmetic is host tensor ops.

use std::cell::Cell;

use fastvideo_plugin_sdk::{tensor_ops as ops, Guider, StepContext, Tensor};

thread_local! {
    static ZERO_INIT_STEPS: Cell<u32> = const { Cell::new(1) };
}

#[derive(serde::Deserialize)]
#[serde(default)]
struct Params {
    zero_init_steps: u32,
}

impl Default for Params {
    fn default() -> Self {
        Self { zero_init_steps: 1 }
    }
}

struct CfgZeroStar;

impl Guider for CfgZeroStar {
    fn init(params: String) -> Result<Vec<String>, String> {
        let p: Params = serde_json::from_str(&params).map_err(|e| format!("cfg-zero-star params: {e}"))?;
        ZERO_INIT_STEPS.set(p.zero_init_steps);
        Ok(vec!["cond".into(), "uncond".into()])
    }

    fn combine(ctx: StepContext, preds: Vec<Tensor>) -> Result<Tensor, String> {
        let [cond, uncond] = preds.as_slice() else {
            return Err(format!("cfg-zero-star: expected 2 branch predictions, got {}", preds.len()));
        };
        if ctx.step_index < ZERO_INIT_STEPS.get() {
            return Ok(ops::scale(cond, 0.0));
        }
        let dims: Vec<i64> = (1..cond.shape().len() as i64).collect();
        let dot = ops::sum(&ops::mul(cond, uncond)?, &dims, true)?;
        let norm2 = ops::add_scalar(&ops::sum(&ops::mul(uncond, uncond)?, &dims, true)?, 1e-8);
        let alpha = ops::div(&dot, &norm2)?;
        let scaled_uncond = ops::mul(uncond, &alpha)?;
        let s = ctx.guidance_scale;
        ops::linear_combination(&[&scaled_uncond, cond], &[1.0 - s, s])
    }
}

fastvideo_plugin_sdk::export_guider!(CfgZeroStar);
fastvideo_plugin_sdk::manifest! {
    name: "cfg-zero-star",
    version: "0.1.0",
    kind: guider,
    hooks: [combine],
    distribution_altering: true,
    description: "CFG-Zero*: optimized scale and zero-init",
    params_schema: {
        "type": "object",
        "properties": {
            "zero_init_steps": {"type": "integer", "minimum": 0, "maximum": 1000}
        },
        "additionalProperties": false
    },
}
