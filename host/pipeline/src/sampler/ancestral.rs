//! Euler ancestral for rectified flows, as ComfyUI runs its `euler_ancestral` sampler on
//! flow-matching models (`sample_euler_ancestral_RF`, eta 1): each step takes an Euler step down
//! to `σ↓ = σ'²/σ` toward the predicted clean sample, then scales the sample back onto the flow
//! path at `σ'` and adds fresh noise to make up its variance, so an exact prediction lands on
//! `(1 − σ')·x0 + σ'·ε` in distribution. The last step (σ' = 0) returns the prediction.

use anyhow::Result;
use tch::{Kind, Tensor};

use super::dmd::StepNoise;
use super::euler::shifted_f32;
use super::schedule::{Sampler, Schedule, NUM_TRAIN_TIMESTEPS};

/// One step from `sample` at `sigma` to `next`, given the clean prediction `x0`; `noise` draws
/// the fresh noise (called only when `next > 0`). float32 in, float32 out.
pub fn euler_ancestral_rf(
    sample: &Tensor,
    x0: &Tensor,
    sigma: f64,
    next: f64,
    noise: impl FnOnce() -> Tensor,
) -> Tensor {
    if next == 0.0 {
        return x0.shallow_clone();
    }
    let down = next * next / sigma;
    let (alpha_next, alpha_down) = (1.0 - next, 1.0 - down);
    let renoise = (next * next - down * down * alpha_next * alpha_next / (alpha_down * alpha_down)).max(0.0).sqrt();
    let ratio = down / sigma;
    let x = sample * ratio + x0 * (1.0 - ratio);
    x * (alpha_next / alpha_down) + noise() * renoise
}

/// [`euler_ancestral_rf`] as a [`Sampler`] over a schedule, each step's noise drawn from the
/// request's seed (as `dmd` draws its own).
pub struct EulerAncestral {
    schedule: Schedule,
    noise: StepNoise,
}

impl EulerAncestral {
    /// The schedule of base levels `base` under `shift`, each step's noise from `noise`.
    pub fn new(base: &[f64], shift: f64, noise: StepNoise) -> Self {
        let mut sigmas = shifted_f32(base, shift);
        let timesteps = sigmas.iter().map(|s| s * NUM_TRAIN_TIMESTEPS as f32).collect();
        sigmas.push(0.0);
        Self { schedule: Schedule { timesteps, sigmas, index: 0 }, noise }
    }

    /// Over the schedule another sampler computed (Euler's spacing for a step count).
    pub fn over(schedule: Schedule, noise: StepNoise) -> Self {
        Self { schedule: Schedule { index: 0, ..schedule }, noise }
    }
}

impl Sampler for EulerAncestral {
    fn begin_at(&mut self, index: usize) -> Result<()> {
        self.schedule.begin_at(index, "euler_ancestral")
    }
    fn schedule(&self) -> &Schedule {
        &self.schedule
    }
    fn step(&mut self, model_output: &Tensor, sample: &Tensor) -> Result<Tensor> {
        let s = &mut self.schedule;
        s.ensure_step_left("euler_ancestral")?;
        let (i, sigma, next) = (s.index, s.sigmas[s.index] as f64, s.sigmas[s.index + 1] as f64);
        s.index += 1;
        let x = sample.to_kind(Kind::Float);
        let x0 = &x - model_output.to_kind(Kind::Float) * sigma;
        let noise = &mut self.noise;
        let out =
            euler_ancestral_rf(&x, &x0, sigma, next, || noise(i, &sample.size(), sample.device()).to_kind(Kind::Float));
        Ok(out.to_kind(model_output.kind()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ComfyUI's arithmetic on one value: x = 1, x0 = 0, σ 0.8 → 0.5, no noise.
    #[test]
    fn one_value_as_comfyuis_formula_gives() {
        let x = Tensor::from_slice(&[1.0f32]);
        let out =
            euler_ancestral_rf(&x, &x.zeros_like(), 0.8, 0.5, || Tensor::zeros([1], (Kind::Float, tch::Device::Cpu)));
        // σ↓ = 0.3125, x = 0.390625, then × (1 − 0.5)/(1 − 0.3125).
        let want = 0.390625 * 0.5 / 0.6875;
        assert!((out.double_value(&[0]) - want).abs() < 1e-6, "{out}");
    }

    /// From an exact point of the flow path, `(1 − σ)·x0 + σ·ε`, with the exact prediction, the
    /// step lands on the path at σ': mean `(1 − σ')·x0`, standard deviation σ'.
    #[test]
    fn an_exact_prediction_lands_on_the_path_at_the_next_level() {
        tch::manual_seed(3);
        let n = 400_000;
        let x0 = Tensor::full([n], 0.3, (Kind::Float, tch::Device::Cpu));
        let (sigma, next) = (0.9, 0.4);
        let x = &x0 * (1.0 - sigma) + Tensor::randn([n], (Kind::Float, tch::Device::Cpu)) * sigma;
        let out = euler_ancestral_rf(&x, &x0, sigma, next, || Tensor::randn([n], (Kind::Float, tch::Device::Cpu)));
        let (mean, std) = (out.mean(Kind::Double).double_value(&[]), out.std(true).double_value(&[]));
        assert!((mean - 0.3 * (1.0 - next)).abs() < 5e-3, "mean {mean}");
        assert!((std - next).abs() < 5e-3, "std {std}");
        // The last step is the prediction itself.
        let last = euler_ancestral_rf(&x, &x0, 0.2, 0.0, || unreachable!());
        assert!(last.equal(&x0));
    }
}
