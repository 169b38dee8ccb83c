//! Profiler: wall time of every denoise step and every pipeline node, read from the host's
//! monotonic clock (the `clock` capability), emitted as `profiler.step` and `profiler.node`
//! events, and a `profiler.summary` (total, step mean/max) when the request ends. With
//! `per_step = false` only nodes and the summary are emitted.

use std::cell::RefCell;

use fastvideo_plugin_sdk::{clock, events, Event, Observer, Tensor};

#[derive(Clone, Copy, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Params {
    per_step: bool,
}

impl Default for Params {
    fn default() -> Self {
        Self { per_step: true }
    }
}

#[derive(Default)]
struct Timings {
    params: Params,
    request_start: u64,
    node_start: u64,
    step_start: u64,
    step_ms: Vec<f64>,
}

thread_local! {
    static T: RefCell<Timings> = RefCell::new(Timings::default());
}

fn ms_since(t0: u64) -> f64 {
    clock::now_ns().saturating_sub(t0) as f64 / 1e6
}

struct Profiler;

impl Observer for Profiler {
    fn init(params: String) -> Result<(), String> {
        let params: Params = serde_json::from_str(&params).map_err(|e| format!("profiler params: {e}"))?;
        T.set(Timings { params, ..Timings::default() });
        Ok(())
    }

    fn on_event(event: Event, _output: Option<&Tensor>) -> Result<(), String> {
        T.with_borrow_mut(|t| {
            match event {
                Event::RequestStart(_) => t.request_start = clock::now_ns(),
                Event::NodeStart(_) => t.node_start = clock::now_ns(),
                Event::NodeEnd(node) => {
                    let payload = serde_json::json!({ "node": node, "ms": ms_since(t.node_start) });
                    events::emit("profiler.node", &payload.to_string());
                }
                Event::StepStart(_) => t.step_start = clock::now_ns(),
                Event::StepEnd(ctx) => {
                    let ms = ms_since(t.step_start);
                    t.step_ms.push(ms);
                    if t.params.per_step {
                        let payload = serde_json::json!({ "step": ctx.step_index, "ms": ms });
                        events::emit("profiler.step", &payload.to_string());
                    }
                }
                Event::RequestEnd(outcome) => {
                    let n = t.step_ms.len();
                    let mean = if n == 0 { 0.0 } else { t.step_ms.iter().sum::<f64>() / n as f64 };
                    let max = t.step_ms.iter().cloned().fold(0.0, f64::max);
                    let payload = serde_json::json!({
                        "outcome": outcome, "total_ms": ms_since(t.request_start),
                        "steps": n, "step_ms_mean": mean, "step_ms_max": max,
                    });
                    events::emit("profiler.summary", &payload.to_string());
                }
                Event::Artifact(_) => {}
            }
            Ok(())
        })
    }
}

fastvideo_plugin_sdk::export_observer!(Profiler);
fastvideo_plugin_sdk::manifest! {
    name: "profiler",
    version: "0.1.0",
    kind: observer,
    hooks: [request_start, node_start, node_end, step_start, step_end, request_end],
    distribution_altering: false,
    description: "Per-step and per-node wall times as events",
    params_schema: {
        "type": "object",
        "properties": {
            "per_step": {"type": "boolean"}
        },
        "additionalProperties": false
    },
}
