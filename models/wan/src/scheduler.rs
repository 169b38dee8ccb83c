//! `scheduler/scheduler_config.json`: which sampler and shift the checkpoint was published with.
//! Only the flow-matching configurations our samplers implement are accepted; anything else is
//! refused naming the key.

use std::path::Path;

use anyhow::{bail, Context, Result};
use fastvideo_layers::config::unsupported;
use fastvideo_request::SamplerKind;
use serde_json::{Map, Value};

/// What the folder's `scheduler/scheduler_config.json` says the sampler runs.
#[derive(Debug, Clone, PartialEq)]
pub struct SchedulerDefaults {
    /// The solver its class names (UniPC or flow-matching Euler).
    pub sampler: SamplerKind,
    /// The flow shift (`flow_shift` or `shift`).
    pub shift: f64,
}

/// Keys that must hold these values (JSON text; or be absent / null) for our samplers to match.
const UNIPC_FIXED: &[(&str, &str)] = &[
    ("prediction_type", r#""flow_prediction""#),
    ("use_flow_sigmas", r#"true"#),
    ("solver_type", r#""bh2""#),
    ("solver_order", r#"2"#),
    ("predict_x0", r#"true"#),
    ("final_sigmas_type", r#""zero""#),
    ("lower_order_final", r#"true"#),
    ("thresholding", r#"false"#),
    ("use_karras_sigmas", r#"false"#),
    ("use_exponential_sigmas", r#"false"#),
    ("use_beta_sigmas", r#"false"#),
    ("use_dynamic_shifting", r#"false"#),
    ("num_train_timesteps", r#"1000"#),
    ("disable_corrector", r#"[]"#),
];

const EULER_FIXED: &[(&str, &str)] = &[
    ("num_train_timesteps", r#"1000"#),
    ("use_dynamic_shifting", r#"false"#),
    ("invert_sigmas", r#"false"#),
    ("stochastic_sampling", r#"false"#),
    ("use_karras_sigmas", r#"false"#),
    ("use_exponential_sigmas", r#"false"#),
    ("use_beta_sigmas", r#"false"#),
];

/// Reads `scheduler_config.json`; a key whose value our samplers would not match is refused, naming
/// it.
pub fn load(path: &Path) -> Result<SchedulerDefaults> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let map: Map<String, Value> =
        serde_json::from_str(&text).with_context(|| format!("{}: not a JSON object", path.display()))?;
    let class = map.get("_class_name").and_then(Value::as_str).unwrap_or("");
    let (sampler, fixed, shift_key) = match class {
        "UniPCMultistepScheduler" => (SamplerKind::Unipc, UNIPC_FIXED, "flow_shift"),
        "FlowMatchEulerDiscreteScheduler" => (SamplerKind::Euler, EULER_FIXED, "shift"),
        other => bail!("{}: scheduler `_class_name` = {other:?} is not supported (UniPCMultistepScheduler or FlowMatchEulerDiscreteScheduler)", path.display()),
    };
    for (key, want) in fixed {
        let want: Value = serde_json::from_str(want).expect("valid JSON literal");
        match map.get(*key) {
            None | Some(Value::Null) => {}
            Some(v) if *v == want || (v.is_number() && v.as_f64() == want.as_f64()) => {}
            Some(v) => return Err(unsupported(path, key, v, &format!("only {want}"))),
        }
    }
    for key in ["shift_terminal", "sigma_min", "sigma_max", "trained_betas"] {
        if let Some(v) = map.get(key).filter(|v| !v.is_null()) {
            return Err(unsupported(path, key, v, "use null"));
        }
    }
    let shift = match map.get(shift_key) {
        None | Some(Value::Null) => 1.0,
        Some(v) => {
            v.as_f64().filter(|s| *s > 0.0).ok_or_else(|| unsupported(path, shift_key, v, "a positive number"))?
        }
    };
    Ok(SchedulerDefaults { sampler, shift })
}
