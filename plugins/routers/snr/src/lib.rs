//! Routes Wan 2.2's two experts by signal-to-noise ratio instead of by timestep: the high-noise
//! expert (0) while `SNR = ((1 - σ) / σ)²` of the step's noise level σ is below `snr`, the
//! low-noise expert (1) from the first step at or above it. With flow matching, timestep
//! `t = 1000·σ`, so `snr` = ((1 - b) / b)² reproduces the built-in boundary `b`; other values move
//! the switch by noise level rather than by the schedule's position, whatever the shift.
//!
//! Parameters: `snr` (the threshold; by default the request's own boundary, converted), and
//! `guidance_scale_2` (the low-noise expert's scale; by default the request's). `force` routes
//! every step to one expert (for tests and comparisons).

use std::cell::Cell;

use fastvideo_plugin_sdk::{ExpertRoute, ExpertRouter, Experts, StepContext};

thread_local! {
    static SNR: Cell<Option<f32>> = const { Cell::new(None) };
    static GUIDANCE_2: Cell<Option<f32>> = const { Cell::new(None) };
    static FORCE: Cell<Option<u32>> = const { Cell::new(None) };
}

#[derive(Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Params {
    snr: Option<f32>,
    guidance_scale_2: Option<f32>,
    force: Option<u32>,
}

struct Snr;

/// The signal-to-noise ratio of a flow-matching noise level (infinite at σ = 0).
fn snr(sigma: f32) -> f32 {
    let s = sigma.clamp(0.0, 1.0);
    if s == 0.0 {
        f32::INFINITY
    } else {
        ((1.0 - s) / s).powi(2)
    }
}

impl ExpertRouter for Snr {
    fn init(params: String) -> Result<(), String> {
        let p: Params = serde_json::from_str(&params).map_err(|e| format!("snr router params: {e}"))?;
        if p.snr.is_some_and(|s| !(s >= 0.0 && s.is_finite())) {
            return Err(format!("snr router: snr {:?} must be a finite number ≥ 0", p.snr));
        }
        SNR.set(p.snr);
        GUIDANCE_2.set(p.guidance_scale_2);
        FORCE.set(p.force);
        Ok(())
    }

    fn route(ctx: StepContext, experts: Experts) -> Result<ExpertRoute, String> {
        let threshold = SNR.get().unwrap_or_else(|| snr(experts.boundary_ratio));
        let expert = match FORCE.get() {
            Some(e) => e,
            None if snr(ctx.sigma) < threshold => 0,
            None => 1,
        };
        let guidance_scale =
            if expert == 0 { ctx.guidance_scale } else { GUIDANCE_2.get().unwrap_or(experts.guidance_scale_2) };
        Ok(ExpertRoute { expert, guidance_scale })
    }
}

fastvideo_plugin_sdk::export_expert_router!(Snr);
fastvideo_plugin_sdk::manifest! {
    name: "snr-router",
    version: "0.1.0",
    kind: expert_router,
    hooks: [route],
    distribution_altering: true,
    description: "Wan 2.2 expert routing by signal-to-noise ratio",
    params_schema: {
        "type": "object",
        "properties": {
            "snr": { "type": "number", "minimum": 0 },
            "guidance_scale_2": { "type": "number", "minimum": 0, "maximum": 100 },
            "force": { "type": "integer", "minimum": 0 }
        },
        "additionalProperties": false
    },
}
