//! LTX-2's noise levels: `linspace(1, 1/N, N)` shifted by diffusers'
//! `FlowMatchEulerDiscreteScheduler` with a `mu` from the video's token count
//! (`calculate_shift` between the scheduler config's base and maximum lengths) and stretched to
//! end at `shift_terminal`; the audio stream uses a copy of the same list.

use std::path::Path;

use anyhow::{ensure, Result};
use fastvideo_layers::flow_match::FlowMatchConfig;
use fastvideo_pipeline::sampler::linspace;

/// The scheduler of an LTX-2 folder.
pub struct Ltx2Schedule {
    /// `scheduler/scheduler_config.json`.
    pub cfg: FlowMatchConfig,
}

impl Ltx2Schedule {
    /// Reads `path` (`scheduler_config.json`).
    pub fn load(path: &Path) -> Result<Self> {
        Ok(Self { cfg: FlowMatchConfig::load(path)? })
    }

    /// The `steps + 1` noise levels (the last 0) for `video_tokens` video tokens, or for an
    /// explicit base list `base` (a distilled recipe's; shifted the same way).
    pub fn sigmas(&self, steps: usize, video_tokens: i64, base: Option<&[f64]>) -> Result<Vec<f32>> {
        ensure!(steps >= 1, "diffusion.num_inference_steps: at least 1");
        // With a terminal stretch, one step divides by zero (the reference returns NaN).
        ensure!(
            steps > 1 || self.cfg.shift_terminal.is_none_or(|t| t == 0.0) || base.is_some(),
            "diffusion.num_inference_steps: 1 step is not defined for this scheduler (its shift_terminal stretches the \
             last level to a fixed value); use 2 or more, or give the levels (`diffusion.sigmas`)"
        );
        let owned;
        let base = match base {
            Some(b) => b,
            None => {
                owned = linspace(1.0, 1.0 / steps as f64, steps);
                &owned
            }
        };
        Ok(self.cfg.sigmas(base, self.cfg.linear_mu(video_tokens)))
    }
}
