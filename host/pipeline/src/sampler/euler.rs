use anyhow::Result;
use tch::Tensor;

use super::schedule::{linspace, shift_sigma, Sampler, Schedule, NUM_TRAIN_TIMESTEPS};

/// Flow-matching Euler, matching diffusers' `FlowMatchEulerDiscreteScheduler` with a static
/// `shift` (no dynamic shifting, no stochastic sampling).
pub struct FlowMatchEuler {
    schedule: Schedule,
}

impl FlowMatchEuler {
    /// The schedule for `steps` steps with timestep shift `shift`.
    pub fn new(steps: usize, shift: f64) -> Self {
        let n = NUM_TRAIN_TIMESTEPS as f32;
        // The scheduler's construction: float32 training sigmas 1000/1000 .. 1/1000, shifted.
        let shifted = |t: f32| {
            let s = t / n;
            (shift as f32) * s / (1.0 + (shift as f32 - 1.0) * s)
        };
        let sigma_max = shifted(n) as f64;
        let sigma_min = shifted(1.0) as f64;
        let ts = linspace(sigma_max * n as f64, sigma_min * n as f64, steps);
        let mut sigmas: Vec<f32> = ts.iter().map(|t| shift_sigma(t / n as f64, shift) as f32).collect();
        let timesteps = sigmas.iter().map(|s| s * n).collect();
        sigmas.push(0.0);
        Self { schedule: Schedule { timesteps, sigmas, index: 0 } }
    }

    /// Moves past a step taken by someone else (the SDE sampler's stochastic steps).
    pub(crate) fn advance(&mut self) {
        self.schedule.index += 1;
    }
}

impl Sampler for FlowMatchEuler {
    fn schedule(&self) -> &Schedule {
        &self.schedule
    }
    fn step(&mut self, model_output: &Tensor, sample: &Tensor) -> Result<Tensor> {
        let s = &mut self.schedule;
        s.ensure_step_left("euler")?;
        let dt = s.sigmas[s.index + 1] - s.sigmas[s.index];
        s.index += 1;
        Ok(sample + model_output * dt as f64)
    }
}
