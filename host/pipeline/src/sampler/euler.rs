use anyhow::Result;
use tch::Tensor;

use super::schedule::{linspace, shift_sigma, Sampler, Schedule, NUM_TRAIN_TIMESTEPS};

/// Flow-matching Euler, matching diffusers' `FlowMatchEulerDiscreteScheduler` with a static
/// `shift` (no dynamic shifting, no stochastic sampling).
pub struct FlowMatchEuler {
    schedule: Schedule,
    /// Step sizes kept in float64 when the schedule was given in float64 (a world model's
    /// few-step sigmas), so its steps match the reference's float64 arithmetic exactly.
    dts: Option<Vec<f64>>,
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
        Self { schedule: Schedule { timesteps, sigmas, index: 0 }, dts: None }
    }

    /// Euler over an explicit schedule's base noise levels (one per step, before the shift), as
    /// diffusers' `set_timesteps(sigmas=base)`: the base rounded to float32 and shifted in
    /// float32 (numpy's arithmetic on a float32 array), model time `sigma × 1000`.
    pub fn with_base_sigmas(base: &[f64], shift: f64) -> Self {
        let mut sigmas = shifted_f32(base, shift);
        let timesteps = sigmas.iter().map(|s| s * NUM_TRAIN_TIMESTEPS as f32).collect();
        sigmas.push(0.0);
        Self { schedule: Schedule { timesteps, sigmas, index: 0 }, dts: None }
    }

    /// Euler over given noise levels (`sigmas`, ending at 0; one step per pair), with model
    /// time `sigma × 1000`: the few-step schedules world models are distilled for.
    pub fn with_sigmas(sigmas: &[f64]) -> Self {
        let n = NUM_TRAIN_TIMESTEPS as f64;
        let steps = sigmas.len().saturating_sub(1);
        let timesteps = sigmas[..steps].iter().map(|s| (s * n) as f32).collect();
        let dts = sigmas.windows(2).map(|w| w[1] - w[0]).collect();
        let sigmas = sigmas.iter().map(|&s| s as f32).collect();
        Self { schedule: Schedule { timesteps, sigmas, index: 0 }, dts: Some(dts) }
    }

    /// Moves past a step taken by someone else (the SDE sampler's stochastic steps).
    pub(crate) fn advance(&mut self) {
        self.schedule.index += 1;
    }
}

/// `shift · s / (1 + (shift − 1) · s)` of each base level, in float32 as diffusers' flow-match
/// schedulers compute it on their float32 sigmas.
pub(super) fn shifted_f32(base: &[f64], shift: f64) -> Vec<f32> {
    let k = shift as f32;
    base.iter().map(|&b| b as f32).map(|s| k * s / (1.0 + (k - 1.0) * s)).collect()
}

impl Sampler for FlowMatchEuler {
    fn begin_at(&mut self, index: usize) -> Result<()> {
        self.schedule.begin_at(index, "euler")
    }
    fn schedule(&self) -> &Schedule {
        &self.schedule
    }
    fn step(&mut self, model_output: &Tensor, sample: &Tensor) -> Result<Tensor> {
        let s = &mut self.schedule;
        s.ensure_step_left("euler")?;
        let dt = match &self.dts {
            Some(d) => d[s.index],
            None => (s.sigmas[s.index + 1] - s.sigmas[s.index]) as f64,
        };
        s.index += 1;
        Ok(sample + model_output * dt)
    }
}
