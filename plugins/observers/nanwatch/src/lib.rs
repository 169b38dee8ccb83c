//! NaNWatch: after every denoise step, checks the step's guided model output (tap
//! `model-output`) with one host reduction, mean |x|, which is non-finite exactly when some
//! element is NaN or Inf (or the sum overflows). The first hit is emitted as
//! `nanwatch.nonfinite` with its step; with `fail = true` the request also stops there, so a
//! diverged run does not burn its remaining steps. `nanwatch.summary` closes every request.

use std::cell::RefCell;

use fastvideo_plugin_sdk::{events, tensor_ops, Event, Observer, Tensor};

#[derive(Clone, Copy, Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Params {
    fail: bool,
}

#[derive(Default)]
struct Watch {
    params: Params,
    checked: u32,
    first: Option<u32>,
}

thread_local! {
    static WATCH: RefCell<Watch> = RefCell::new(Watch::default());
}

struct NanWatch;

impl Observer for NanWatch {
    fn init(params: String) -> Result<(), String> {
        let params: Params = serde_json::from_str(&params).map_err(|e| format!("nanwatch params: {e}"))?;
        WATCH.set(Watch { params, ..Watch::default() });
        Ok(())
    }

    fn on_event(event: Event, output: Option<&Tensor>) -> Result<(), String> {
        WATCH.with_borrow_mut(|w| match (event, output) {
            (Event::StepEnd(ctx), Some(out)) => {
                w.checked += 1;
                let m = tensor_ops::abs_mean(out);
                if m.is_finite() || w.first.is_some() {
                    return Ok(());
                }
                w.first = Some(ctx.step_index);
                let value = if m.is_nan() { "nan" } else { "inf" };
                let payload =
                    serde_json::json!({ "step": ctx.step_index, "tap": "model-output", "value": value }).to_string();
                events::emit("nanwatch.nonfinite", &payload);
                if w.params.fail {
                    return Err(format!("non-finite model output ({value}) at step {}", ctx.step_index));
                }
                Ok(())
            }
            (Event::RequestEnd(outcome), _) => {
                let payload = serde_json::json!({ "steps_checked": w.checked, "first_nonfinite_step": w.first, "outcome": outcome });
                events::emit("nanwatch.summary", &payload.to_string());
                Ok(())
            }
            _ => Ok(()),
        })
    }
}

fastvideo_plugin_sdk::export_observer!(NanWatch);
fastvideo_plugin_sdk::manifest! {
    name: "nanwatch",
    version: "0.1.0",
    kind: observer,
    hooks: [step_end, request_end],
    distribution_altering: false,
    description: "First NaN/Inf in the model output, by step",
    params_schema: {
        "type": "object",
        "properties": {
            "fail": {"type": "boolean"}
        },
        "additionalProperties": false
    },
}
