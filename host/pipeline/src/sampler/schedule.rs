//! What every sampler is: the [`Sampler`] trait, the [`Schedule`] of timesteps and noise levels it
//! walks, and the schedule arithmetic the samplers share. Apart from [`build`](super::build) so
//! the samplers depend on this and not on the module that picks among them.

use anyhow::Result;
use tch::Tensor;

/// Training timesteps of the flow-matching models we run (diffusers `num_train_timesteps`).
pub const NUM_TRAIN_TIMESTEPS: usize = 1000;

/// A sampler's timesteps and noise levels, and how far it has got.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// The model time passed to the transformer at each step.
    pub timesteps: Vec<f32>,
    /// Noise levels, one more than steps (ends at 0).
    pub sigmas: Vec<f32>,
    /// Index of the next step.
    pub index: usize,
}

impl Schedule {
    /// Moves a fresh schedule to step `index` (see [`Sampler::begin_at`]).
    pub(super) fn begin_at(&mut self, index: usize, sampler: &str) -> Result<()> {
        anyhow::ensure!(self.index == 0, "{sampler}: begin_at after {} steps were taken", self.index);
        anyhow::ensure!(
            index < self.timesteps.len(),
            "{sampler}: cannot begin at step {index} of {}",
            self.timesteps.len()
        );
        self.index = index;
        Ok(())
    }

    /// Fails once every step has been taken.
    pub(super) fn ensure_step_left(&self, sampler: &str) -> Result<()> {
        anyhow::ensure!(
            self.index < self.timesteps.len(),
            "{sampler}: step {} past the last of {}",
            self.index,
            self.timesteps.len()
        );
        Ok(())
    }
}

/// One request's solver.
pub trait Sampler: Send {
    /// The sampler's timesteps, sigmas and position.
    fn schedule(&self) -> &Schedule;
    /// Advances `sample` by one solver step given the model's (guided) prediction.
    fn step(&mut self, model_output: &Tensor, sample: &Tensor) -> Result<Tensor>;
    /// Starts the schedule at step `index` instead of 0, before any step is taken, as diffusers
    /// does for video to video (`timesteps[t_start:]`): a multistep solver starts with an empty
    /// history there, exactly as it does at step 0.
    fn begin_at(&mut self, index: usize) -> Result<()>;

    /// The model time of each step ([`Schedule::timesteps`]).
    fn timesteps(&self) -> &[f32] {
        &self.schedule().timesteps
    }
    /// Noise levels, one more than steps, ending at 0 ([`Schedule::sigmas`]).
    fn sigmas(&self) -> &[f32] {
        &self.schedule().sigmas
    }
    /// Index of the next step; equals the step count once every step has been taken.
    fn step_index(&self) -> usize {
        self.schedule().index
    }
    /// What the initial noise is multiplied by before the first step: 1 (pure noise at σ = 1),
    /// except for a schedule that starts below 1 and treats the noise as its first level
    /// (rCM: `x = ε · σ₀`, as TurboDiffusion starts).
    fn initial_noise_scale(&self) -> f64 {
        1.0
    }
    /// `(step, log-probability)` of each stochastic step taken so far; empty for deterministic
    /// samplers. Reads the values back from the device: call it once, at the end.
    fn log_probs(&self) -> Vec<(u32, f32)> {
        Vec::new()
    }
}

/// `shift * s / (1 + (shift - 1) * s)`, the flow-matching timestep shift.
pub(super) fn shift_sigma(s: f64, shift: f64) -> f64 {
    shift * s / (1.0 + (shift - 1.0) * s)
}

/// `numpy.linspace(start, stop, n)`.
pub fn linspace(start: f64, stop: f64, n: usize) -> Vec<f64> {
    if n == 1 {
        return vec![start];
    }
    let step = (stop - start) / (n - 1) as f64;
    // numpy computes start + i*step and pins the last element to stop.
    (0..n).map(|i| if i == n - 1 { stop } else { start + i as f64 * step }).collect()
}
