//! Classic classifier-free guidance, `uncond + s * (cond - uncond)`, as three host ops in the
//! order the built-in policy computes them (so the result is bit-identical to it): no tensor
//! data enters the sandbox.

use fastvideo_plugin_sdk::{tensor_ops, Guider, StepContext, Tensor};

struct Cfg;

impl Guider for Cfg {
    fn init(_params: String) -> Result<Vec<String>, String> {
        Ok(vec!["cond".into(), "uncond".into()])
    }

    fn combine(ctx: StepContext, preds: Vec<Tensor>) -> Result<Tensor, String> {
        let s = ctx.guidance_scale;
        match preds.as_slice() {
            [cond, uncond] => {
                let delta = tensor_ops::sub(cond, uncond)?;
                tensor_ops::add(uncond, &tensor_ops::scale(&delta, s))
            }
            _ => Err(format!("cfg: expected 2 branch predictions, got {}", preds.len())),
        }
    }
}

fastvideo_plugin_sdk::export_guider!(Cfg);
fastvideo_plugin_sdk::manifest! {
    name: "cfg",
    version: "0.1.0",
    kind: guider,
    hooks: [combine],
    distribution_altering: false,
    needs_eager: false,
    params_schema: {"type": "object", "properties": {}, "additionalProperties": false},
}
