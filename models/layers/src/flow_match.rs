//! diffusers' `FlowMatchEulerDiscreteScheduler` as image pipelines configure it: the
//! scheduler config read strictly, and the sigmas `set_timesteps(sigmas=…, mu=…)` computes —
//! a static shift, or a resolution-dependent one (`mu`, exponential or linear), optionally
//! stretched to end at `shift_terminal` — in float32 as numpy computes them.

use std::path::Path;

use anyhow::Result;
use serde::Deserialize;

use crate::config::{read_config, unsupported};

/// `scheduler/scheduler_config.json` (diffusers `FlowMatchEulerDiscreteScheduler`), the keys
/// its `set_timesteps` reads; stochastic sampling and the Karras/exponential/beta conversions
/// are refused.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct FlowMatchConfig {
    #[serde(default = "defaults::train_steps")]
    pub num_train_timesteps: u32,
    #[serde(default = "defaults::one")]
    pub shift: f64,
    #[serde(default)]
    pub use_dynamic_shifting: bool,
    #[serde(default = "defaults::base_shift")]
    pub base_shift: f64,
    #[serde(default = "defaults::max_shift")]
    pub max_shift: f64,
    #[serde(default = "defaults::base_seq")]
    pub base_image_seq_len: i64,
    #[serde(default = "defaults::max_seq")]
    pub max_image_seq_len: i64,
    #[serde(default)]
    pub shift_terminal: Option<f64>,
    #[serde(default = "defaults::exponential")]
    pub time_shift_type: String,
    #[serde(default)]
    pub invert_sigmas: bool,
    #[serde(default)]
    pub stochastic_sampling: bool,
    #[serde(default)]
    pub use_karras_sigmas: bool,
    #[serde(default)]
    pub use_exponential_sigmas: bool,
    #[serde(default)]
    pub use_beta_sigmas: bool,
}

impl FlowMatchConfig {
    /// Reads and checks `path`.
    pub fn load(path: &Path) -> Result<Self> {
        let c: Self = read_config(path)?;
        for (key, on) in [
            ("invert_sigmas", c.invert_sigmas),
            ("stochastic_sampling", c.stochastic_sampling),
            ("use_karras_sigmas", c.use_karras_sigmas),
            ("use_exponential_sigmas", c.use_exponential_sigmas),
            ("use_beta_sigmas", c.use_beta_sigmas),
        ] {
            if on {
                return Err(unsupported(path, key, true, "false"));
            }
        }
        if !matches!(c.time_shift_type.as_str(), "exponential" | "linear") {
            return Err(unsupported(path, "time_shift_type", &c.time_shift_type, "exponential or linear"));
        }
        Ok(c)
    }
}

impl FlowMatchConfig {
    /// The shifted sigmas for base sigmas `base` (the pipeline's, e.g. `linspace(1, 1/N, N)`)
    /// and the resolution's `mu` (used when `use_dynamic_shifting`), with the final 0 appended.
    pub fn sigmas(&self, base: &[f64], mu: f64) -> Vec<f32> {
        let mut s: Vec<f32> = base.iter().map(|&x| x as f32).collect();
        for x in &mut s {
            *x = match (self.use_dynamic_shifting, self.time_shift_type.as_str()) {
                (true, "linear") => {
                    let m = mu as f32;
                    m / (m + (1.0 / *x - 1.0))
                }
                (true, _) => {
                    let e = mu.exp() as f32;
                    e / (e + (1.0 / *x - 1.0))
                }
                (false, _) => {
                    let shift = self.shift as f32;
                    shift * *x / (1.0 + (shift - 1.0) * *x)
                }
            };
        }
        if let Some(terminal) = self.shift_terminal.filter(|t| *t != 0.0) {
            let last = 1.0 - *s.last().unwrap_or(&0.0);
            let scale = last / (1.0 - terminal as f32);
            for x in &mut s {
                *x = 1.0 - (1.0 - *x) / scale;
            }
        }
        s.push(0.0);
        s
    }

    /// `mu` of a sequence of `tokens` by the config's line between (`base_image_seq_len`,
    /// `base_shift`) and (`max_image_seq_len`, `max_shift`): diffusers' `calculate_shift`.
    pub fn linear_mu(&self, tokens: i64) -> f64 {
        let m = (self.max_shift - self.base_shift) / (self.max_image_seq_len - self.base_image_seq_len) as f64;
        let b = self.base_shift - m * self.base_image_seq_len as f64;
        tokens as f64 * m + b
    }
}

mod defaults {
    pub fn train_steps() -> u32 {
        1000
    }
    pub fn one() -> f64 {
        1.0
    }
    pub fn base_shift() -> f64 {
        0.5
    }
    pub fn max_shift() -> f64 {
        1.15
    }
    pub fn base_seq() -> i64 {
        256
    }
    pub fn max_seq() -> i64 {
        4096
    }
    pub fn exponential() -> String {
        "exponential".into()
    }
}
