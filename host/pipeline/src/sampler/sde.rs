//! Flow-matching SDE sampling with per-step log-probabilities (Flow-GRPO, Liu et al. 2025).
//!
//! The reverse-time SDE of a rectified flow, discretized with Euler–Maruyama, turns each step
//! into a Gaussian transition `x_next ~ N(mean, (σ_t·√(−dt))²)` with
//! `σ_t = a·√(σ / (1 − σ))` (σ = 1 is replaced by the schedule's second sigma, as Flow-GRPO
//! does) and
//! `mean = x·(1 + σ_t²/(2σ)·dt) + v·(1 + σ_t²·(1 − σ)/(2σ))·dt`.
//! The log-probability of the sample taken is the Gaussian's log-density averaged over the
//! latent's elements — Flow-GRPO's `sde_step_with_logprob`, which an RL trainer recomputes under
//! its own weights to form its policy ratio. Steps not chosen as stochastic are plain Euler
//! steps (`σ_t = 0`). Arithmetic is float32, like the reference.

use anyhow::Result;
use tch::{Kind, Tensor};

use super::euler::FlowMatchEuler;
use super::schedule::{Sampler, Schedule};
use crate::noise::seeded_noise;

/// One stochastic step's transition: the sample taken, its Gaussian's mean and standard
/// deviation (`σ_t·√(−dt)`), and the sample's log-probability (mean over elements).
pub struct SdeStep {
    /// The next latents.
    pub sample: Tensor,
    /// The transition's mean.
    pub mean: Tensor,
    /// The transition's standard deviation, `σ_t·√(−dt)`.
    pub std: f32,
    /// `σ_t` itself (Flow-GRPO's `std_dev_t`).
    pub std_dev_t: f32,
    /// Log-density of `sample`, averaged over every element but the batch dimension: `[B]`.
    pub log_prob: Tensor,
}

/// One Flow-GRPO step from `sample` at noise level `sigma` to `sigma_next`, given the model's
/// velocity prediction `model_output`. `noise` draws the next sample; `prev_sample` instead
/// scores a given one (the trainer's recomputation). `sigma_max` is the schedule's second sigma,
/// used in place of σ = 1.
pub fn flow_sde_step(
    model_output: &Tensor,
    sample: &Tensor,
    sigma: f32,
    sigma_next: f32,
    sigma_max: f32,
    noise_level: f32,
    draw: SdeDraw,
) -> SdeStep {
    let x = sample.to_kind(Kind::Float);
    let v = model_output.to_kind(Kind::Float);
    let dt = sigma_next - sigma;
    let std_dev_t = (sigma / (1.0 - if sigma == 1.0 { sigma_max } else { sigma })).sqrt() * noise_level;
    let a = 1.0 + std_dev_t * std_dev_t / (2.0 * sigma) * dt;
    let b = (1.0 + std_dev_t * std_dev_t * (1.0 - sigma) / (2.0 * sigma)) * dt;
    let mean = &x * a as f64 + &v * b as f64;
    let std = std_dev_t * (-dt).sqrt();
    let next = match draw {
        SdeDraw::Noise(n) => &mean + n.to_kind(Kind::Float) * std as f64,
        SdeDraw::Given(p) => p.to_kind(Kind::Float),
    };
    let dims: Vec<i64> = (1..x.dim() as i64).collect();
    let log_prob = ((&next - &mean).square() / (-2.0 * (std as f64) * (std as f64))
        - (std as f64).ln()
        - (2.0 * std::f64::consts::PI).sqrt().ln())
    .mean_dim(dims.as_slice(), false, Kind::Float);
    SdeStep { sample: next, mean, std, std_dev_t, log_prob }
}

/// Where an SDE step's next sample comes from.
pub enum SdeDraw<'a> {
    /// Sampled: `mean + std·noise`.
    Noise(&'a Tensor),
    /// Given (already taken): only its log-probability is computed.
    Given(&'a Tensor),
}

/// The noise of stochastic step `step` of a request seeded `seed`: its own ChaCha stream, so a
/// step's draw does not depend on which other steps are stochastic.
pub fn step_noise_seed(seed: u64, step: u32) -> u64 {
    // splitmix64 of (seed, step): well-mixed, and never the initial noise's stream (step + 1 > 0).
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15u64.wrapping_mul(step as u64 + 1));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Euler's schedule, with the chosen steps stochastic. Records each stochastic step's
/// log-probability for the request's trajectory.
pub struct FlowSde {
    euler: FlowMatchEuler,
    noise_level: f32,
    stochastic: Vec<bool>,
    seed: u64,
    log_probs: Vec<(u32, Tensor)>,
}

impl FlowSde {
    /// `steps` Euler steps with shift `shift`; `sde_steps` (each below `steps`) are stochastic
    /// with noise scale `noise_level`, their noise drawn from `seed`.
    pub fn new(steps: usize, shift: f64, noise_level: f32, sde_steps: &[u32], seed: u64) -> Self {
        Self::over(FlowMatchEuler::new(steps, shift), noise_level, sde_steps, seed)
    }

    /// [`new`](Self::new) over an explicit schedule's base levels (before the shift).
    pub fn with_base_sigmas(base: &[f64], shift: f64, noise_level: f32, sde_steps: &[u32], seed: u64) -> Self {
        Self::over(FlowMatchEuler::with_base_sigmas(base, shift), noise_level, sde_steps, seed)
    }

    fn over(euler: FlowMatchEuler, noise_level: f32, sde_steps: &[u32], seed: u64) -> Self {
        let steps = euler.schedule().timesteps.len();
        let mut stochastic = vec![false; steps];
        for &i in sde_steps {
            if let Some(s) = stochastic.get_mut(i as usize) {
                *s = true;
            }
        }
        Self { euler, noise_level, stochastic, seed, log_probs: Vec::new() }
    }
}

impl Sampler for FlowSde {
    fn begin_at(&mut self, index: usize) -> Result<()> {
        self.euler.begin_at(index)
    }
    fn schedule(&self) -> &Schedule {
        self.euler.schedule()
    }

    fn step(&mut self, model_output: &Tensor, sample: &Tensor) -> Result<Tensor> {
        let i = self.euler.schedule().index;
        if !self.stochastic.get(i).copied().unwrap_or(false) {
            return self.euler.step(model_output, sample);
        }
        let s = self.euler.schedule();
        s.ensure_step_left("flow_sde")?;
        let (sigma, next) = (s.sigmas[i], s.sigmas[i + 1]);
        // Flow-GRPO replaces σ = 1 (the first step) with the schedule's second sigma.
        let sigma_max = s.sigmas.get(1).copied().unwrap_or(sigma);
        let noise = seeded_noise(&sample.size(), step_noise_seed(self.seed, i as u32), sample.device());
        let out = flow_sde_step(model_output, sample, sigma, next, sigma_max, self.noise_level, SdeDraw::Noise(&noise));
        // Kept on the device: reading it here would wait for the step's kernels every step.
        self.log_probs.push((i as u32, out.log_prob));
        self.euler.advance();
        Ok(out.sample.to_kind(sample.kind()))
    }

    fn log_probs(&self) -> Vec<(u32, f32)> {
        self.log_probs.iter().map(|(i, lp)| (*i, lp.double_value(&[0]) as f32)).collect()
    }
}
