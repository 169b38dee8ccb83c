use anyhow::{ensure, Result};
use tch::Tensor;

use super::{linspace, shift_sigma, Sampler, NUM_TRAIN_TIMESTEPS};

/// Flow-matching Euler, matching diffusers' `FlowMatchEulerDiscreteScheduler` with a static
/// `shift` (no dynamic shifting, no stochastic sampling).
pub struct FlowMatchEuler {
    timesteps: Vec<f32>,
    sigmas: Vec<f32>,
    index: usize,
}

impl FlowMatchEuler {
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
        Self { timesteps, sigmas, index: 0 }
    }
}

impl Sampler for FlowMatchEuler {
    fn timesteps(&self) -> &[f32] {
        &self.timesteps
    }
    fn sigmas(&self) -> &[f32] {
        &self.sigmas
    }
    fn step_index(&self) -> usize {
        self.index
    }
    fn step(&mut self, model_output: &Tensor, sample: &Tensor) -> Result<Tensor> {
        ensure!(
            self.index < self.timesteps.len(),
            "euler: step {} past the last of {}",
            self.index,
            self.timesteps.len()
        );
        let dt = self.sigmas[self.index + 1] - self.sigmas[self.index];
        self.index += 1;
        Ok(sample + model_output * dt as f64)
    }
}
