//! TaylorSeer (as in cache-dit), at the level of the whole step: on computed steps it keeps the
//! guided model output and its finite differences over step index (first, and with `order = 2`
//! second); on skipped steps it supplies the Taylor extrapolation
//! `f + f' k + f'' k² / 2` (k = steps since the last computed one) and the host runs no forward.
//! `warmup_steps` and the last `final_steps` always compute; in between one step in `interval`
//! computes (interval 1 = every step, identical to no plugin). Each skip emits `taylorseer.hit`.

use std::cell::RefCell;

use fastvideo_plugin_sdk::{events, tensor_ops as ops, StepContext, StepInterceptor, Tensor};

#[derive(Clone, Copy, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Params {
    order: u32,
    interval: u32,
    warmup_steps: u32,
    final_steps: u32,
}

impl Default for Params {
    fn default() -> Self {
        Self { order: 1, interval: 2, warmup_steps: 3, final_steps: 1 }
    }
}

#[derive(Default)]
struct Seer {
    params: Params,
    /// Output and its differences at the last computed step: [f, f', f''].
    derivs: Vec<Tensor>,
    last: u32,
    predicted: bool,
}

thread_local! {
    static SEER: RefCell<Seer> = RefCell::new(Seer::default());
}

impl Seer {
    fn computes(&self, ctx: &StepContext) -> bool {
        let (p, i) = (&self.params, ctx.step_index);
        self.derivs.len() < 2
            || i < p.warmup_steps
            || i + p.final_steps >= ctx.num_steps
            || (i - p.warmup_steps) % p.interval == 0
    }
}

struct TaylorSeer;

impl StepInterceptor for TaylorSeer {
    fn init(params: String) -> Result<(), String> {
        let params: Params = serde_json::from_str(&params).map_err(|e| format!("taylorseer params: {e}"))?;
        if !(1..=2).contains(&params.order) || params.interval == 0 {
            return Err("taylorseer: order must be 1 or 2 and interval at least 1".into());
        }
        SEER.set(Seer { params, ..Seer::default() });
        Ok(())
    }

    fn before_step(ctx: StepContext, _latents: &Tensor) -> Result<Option<Tensor>, String> {
        SEER.with_borrow_mut(|s| {
            s.predicted = !s.computes(&ctx);
            if !s.predicted {
                return Ok(None);
            }
            let k = (ctx.step_index - s.last) as f32;
            let weights = [1.0, k, k * k / 2.0];
            let terms: Vec<&Tensor> = s.derivs.iter().collect();
            let out = ops::linear_combination(&terms, &weights[..terms.len()])?;
            events::emit("taylorseer.hit", &format!("{{\"step\":{}}}", ctx.step_index));
            Ok(Some(out))
        })
    }

    fn after_step(ctx: StepContext, output: &Tensor) -> Result<(), String> {
        SEER.with_borrow_mut(|s| {
            if s.predicted {
                return Ok(());
            }
            let mut next = vec![output.share()];
            if let Some(prev) = s.derivs.first() {
                let dt = (ctx.step_index - s.last) as f32;
                next.push(ops::linear_combination(&[output, prev], &[1.0 / dt, -1.0 / dt])?);
                if let (2, Some(prev_d1)) = (s.params.order, s.derivs.get(1)) {
                    next.push(ops::linear_combination(&[&next[1], prev_d1], &[1.0 / dt, -1.0 / dt])?);
                }
            }
            s.derivs = next;
            s.last = ctx.step_index;
            Ok(())
        })
    }
}

fastvideo_plugin_sdk::export_step_interceptor!(TaylorSeer);
fastvideo_plugin_sdk::manifest! {
    name: "taylorseer",
    version: "0.1.0",
    kind: step_interceptor,
    hooks: [before_step, after_step],
    distribution_altering: true,
    description: "TaylorSeer step cache: extrapolate the model output on skipped steps",
    params_schema: {
        "type": "object",
        "properties": {
            "order": {"type": "integer", "minimum": 1, "maximum": 2},
            "interval": {"type": "integer", "minimum": 1},
            "warmup_steps": {"type": "integer", "minimum": 0},
            "final_steps": {"type": "integer", "minimum": 0}
        },
        "additionalProperties": false
    },
}
