use anyhow::Result;
use tch::{Kind, Tensor};

use super::euler::shifted_f32;
use super::schedule::{Sampler, Schedule, NUM_TRAIN_TIMESTEPS};
use super::sde::step_noise_seed;
use crate::noise::seeded_noise;

/// The noise of step `i` for a sample of `shape` on `device`.
pub type StepNoise = Box<dyn FnMut(usize, &[i64], tch::Device) -> Tensor + Send>;

/// The sampler few-step distilled models are trained for (DMD, LCM, LightX2V): each step
/// predicts the clean sample `x0 = x − σ·v` and noises it afresh to the next level,
/// `(1 − σ')·x0 + σ'·ε`; the last step (σ' = 0) returns `x0`. diffusers'
/// `FlowMatchLCMScheduler` (without its upscaling), computed in float32 as it computes it.
pub struct Dmd {
    schedule: Schedule,
    noise: StepNoise,
    /// [`Sampler::initial_noise_scale`]: 1, or the first level for rCM.
    initial_scale: f64,
}

impl Dmd {
    /// The schedule of an explicit list's base levels (before the shift); each step's noise
    /// drawn from `seed`'s stream for that step.
    pub fn new(base: &[f64], shift: f64, seed: u64) -> Self {
        Self::with_noise(base, shift, seeded(seed))
    }

    /// [`new`](Self::new) with the noise of each step given by `noise` (tests feed the
    /// reference's draws).
    pub fn with_noise(base: &[f64], shift: f64, noise: StepNoise) -> Self {
        let mut sigmas = shifted_f32(base, shift);
        let timesteps = sigmas.iter().map(|s| s * NUM_TRAIN_TIMESTEPS as f32).collect();
        sigmas.push(0.0);
        Self { schedule: Schedule { timesteps, sigmas, index: 0 }, noise, initial_scale: 1.0 }
    }

    /// Over the schedule another sampler computed (Euler's default spacing for a step count),
    /// each step's noise drawn from `seed`.
    pub fn over(schedule: Schedule, seed: u64) -> Self {
        Self { schedule: Schedule { index: 0, ..schedule }, noise: seeded(seed), initial_scale: 1.0 }
    }
}

impl Dmd {
    /// rCM's consistency sampling as TurboDiffusion runs it: `dmd` steps over flow levels
    /// given as they are (no shift), the initial noise scaled by the first.
    pub fn consistency(levels: &[f64], noise: StepNoise) -> Self {
        let initial_scale = levels.first().copied().unwrap_or(1.0);
        Self { initial_scale, ..Self::with_noise(levels, 1.0, noise) }
    }

    /// [`consistency`](Self::consistency) with each step's noise drawn from `seed`.
    pub fn consistency_seeded(levels: &[f64], seed: u64) -> Self {
        Self::consistency(levels, seeded(seed))
    }
}

/// Each step's noise from `seed`'s stream for that step (as `flow_sde` draws its own).
pub(super) fn seeded(seed: u64) -> StepNoise {
    Box::new(move |i, shape, dev| seeded_noise(shape, step_noise_seed(seed, i as u32), dev))
}

impl Sampler for Dmd {
    fn initial_noise_scale(&self) -> f64 {
        self.initial_scale
    }
    fn begin_at(&mut self, index: usize) -> Result<()> {
        self.schedule.begin_at(index, "dmd")
    }
    fn schedule(&self) -> &Schedule {
        &self.schedule
    }
    fn step(&mut self, model_output: &Tensor, sample: &Tensor) -> Result<Tensor> {
        let s = &mut self.schedule;
        s.ensure_step_left("dmd")?;
        let (i, sigma, next) = (s.index, s.sigmas[s.index] as f64, s.sigmas[s.index + 1] as f64);
        s.index += 1;
        let x0 = sample.to_kind(Kind::Float) - model_output.to_kind(Kind::Float) * sigma;
        let out = if next == 0.0 {
            x0
        } else {
            let eps = (self.noise)(i, &sample.size(), sample.device()).to_kind(Kind::Float);
            x0 * (1.0 - next) + eps * next
        };
        Ok(out.to_kind(model_output.kind()))
    }
}
