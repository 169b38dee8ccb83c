//! Adaptive projected guidance (Sadat et al., ICLR 2025): the guidance difference `c − u`,
//! optionally averaged with momentum across steps and rescaled to at most `norm_threshold`, is
//! split into parts parallel and orthogonal to `c`; the parallel part (which oversaturates) is
//! weighted by `eta`: `c + (s − 1)·(orth + eta·par)`. Norms are over all but the batch dim.
//! The momentum average is a tensor handle kept across steps: per-request plugin state.

use std::cell::{Cell, RefCell};

use fastvideo_plugin_sdk::{tensor_ops as ops, Guider, StepContext, Tensor};

thread_local! {
    static ETA: Cell<f32> = const { Cell::new(0.0) };
    static NORM_THRESHOLD: Cell<f32> = const { Cell::new(0.0) };
    static MOMENTUM: Cell<f32> = const { Cell::new(0.0) };
    static RUNNING: RefCell<Option<Tensor>> = const { RefCell::new(None) };
}

#[derive(Default, serde::Deserialize)]
#[serde(default)]
struct Params {
    eta: f32,
    norm_threshold: f32,
    momentum: f32,
}

struct Apg;

impl Guider for Apg {
    fn init(params: String) -> Result<Vec<String>, String> {
        let p: Params = serde_json::from_str(&params).map_err(|e| format!("apg params: {e}"))?;
        ETA.set(p.eta);
        NORM_THRESHOLD.set(p.norm_threshold);
        MOMENTUM.set(p.momentum);
        Ok(vec!["cond".into(), "uncond".into()])
    }

    fn combine(ctx: StepContext, preds: Vec<Tensor>) -> Result<Tensor, String> {
        let [cond, uncond] = preds.as_slice() else {
            return Err(format!("apg: expected 2 branch predictions, got {}", preds.len()));
        };
        let dims: Vec<i64> = (1..cond.shape().len() as i64).collect();
        let mut diff = ops::sub(cond, uncond)?;
        let momentum = MOMENTUM.get();
        if momentum != 0.0 {
            diff = RUNNING.with_borrow_mut(|running| -> Result<Tensor, String> {
                let avg = match running.take() {
                    Some(prev) => ops::linear_combination(&[&diff, &prev], &[1.0, momentum])?,
                    None => diff,
                };
                let out = avg.share();
                *running = Some(avg);
                Ok(out)
            })?;
        }
        let threshold = NORM_THRESHOLD.get();
        if threshold > 0.0 {
            // min(1, threshold / ‖diff‖), per sample.
            let norm = ops::norm(&diff, 2.0, &dims, true)?;
            let ratio = ops::div(&ops::add_scalar(&ops::scale(&norm, 0.0), threshold), &norm)?;
            diff = ops::mul(&diff, &ops::clamp(&ratio, 0.0, 1.0))?;
        }
        // Unit vector along cond (normalize clamps the norm at 1e-12 like torch's).
        let cond_norm = ops::clamp(&ops::norm(cond, 2.0, &dims, true)?, 1e-12, f32::MAX);
        let unit = ops::div(cond, &cond_norm)?;
        let along = ops::sum(&ops::mul(&diff, &unit)?, &dims, true)?;
        let parallel = ops::mul(&along, &unit)?;
        let s = ctx.guidance_scale;
        let eta = ETA.get();
        // c + (s-1)·(diff − par + eta·par) = c + (s-1)·diff + (s-1)(eta−1)·par
        ops::linear_combination(&[cond, &diff, &parallel], &[1.0, s - 1.0, (s - 1.0) * (eta - 1.0)])
    }
}

fastvideo_plugin_sdk::export_guider!(Apg);
fastvideo_plugin_sdk::manifest! {
    name: "apg",
    version: "0.1.0",
    kind: guider,
    hooks: [combine],
    distribution_altering: true,
    description: "Adaptive projected guidance",
    params_schema: {
        "type": "object",
        "properties": {
            "eta": {"type": "number"},
            "norm_threshold": {"type": "number", "minimum": 0},
            "momentum": {"type": "number", "minimum": -1, "maximum": 1}
        },
        "additionalProperties": false
    },
}
