//! ComfyUI's `gradient_estimation` sampler (`sample_gradient_estimation`, `ge_gamma` 2; Permenter
//! & Yuan, "Interpreting and Improving Diffusion Models from an Optimization Perspective", ICML
//! 2024): the first step is Euler's; every later one steps on `γ·v + (1 − γ)·v_prev`, the velocity
//! extrapolated from the last step's, which corrects Euler's lag on a curved path at no extra
//! model call. On a flow-matching model ComfyUI's `d = (x − x̂0)/σ` is the predicted velocity, so
//! the step is `x + v̄·(σ' − σ)`; the last one (σ' = 0) steps too (no jump to the prediction).

use anyhow::Result;
use tch::{Kind, Tensor};

use super::schedule::{Sampler, Schedule};

/// ComfyUI's default `ge_gamma`.
pub const GE_GAMMA: f64 = 2.0;

/// The velocity a step moves along: `v` on the first step (`prev` absent), else
/// `γ·v + (1 − γ)·prev`.
pub fn gradient_estimate(v: &Tensor, prev: Option<&Tensor>, gamma: f64) -> Tensor {
    match prev {
        None => v.shallow_clone(),
        Some(p) => v * gamma + p * (1.0 - gamma),
    }
}

/// [`gradient_estimate`] as a [`Sampler`] over a schedule (Euler's spacing for a step count, or
/// the levels given), float32 arithmetic.
pub struct GradientEstimation {
    schedule: Schedule,
    prev: Option<Tensor>,
}

impl GradientEstimation {
    /// Over `schedule` (its sigmas end with 0).
    pub fn over(schedule: Schedule) -> Self {
        Self { schedule: Schedule { index: 0, ..schedule }, prev: None }
    }
}

impl Sampler for GradientEstimation {
    fn begin_at(&mut self, index: usize) -> Result<()> {
        // A loop that starts part way (video to video) has no previous velocity: Euler first.
        self.prev = None;
        self.schedule.begin_at(index, "gradient_estimation")
    }
    fn schedule(&self) -> &Schedule {
        &self.schedule
    }
    fn step(&mut self, model_output: &Tensor, sample: &Tensor) -> Result<Tensor> {
        let s = &mut self.schedule;
        s.ensure_step_left("gradient_estimation")?;
        let dt = (s.sigmas[s.index + 1] - s.sigmas[s.index]) as f64;
        s.index += 1;
        let v = model_output.to_kind(Kind::Float);
        let moved = gradient_estimate(&v, self.prev.as_ref(), GE_GAMMA);
        self.prev = Some(v);
        Ok((sample.to_kind(Kind::Float) + moved * dt).to_kind(model_output.kind()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::FlowMatchEuler;

    /// ComfyUI's loop by hand on one value: Euler, then `x + (2·d − d_prev)·dt`.
    #[test]
    fn steps_as_comfyui_does_on_one_value() {
        let sched = FlowMatchEuler::new(3, 1.0).schedule().clone();
        let sig: Vec<f64> = sched.sigmas.iter().map(|&s| s as f64).collect();
        let mut ge = GradientEstimation::over(sched);
        let vs = [0.5f64, -0.25, 1.5];
        let mut x = Tensor::from_slice(&[0.8f32]);
        let (mut want, mut prev) = (0.8f64, None::<f64>);
        for (i, &v) in vs.iter().enumerate() {
            x = ge.step(&Tensor::from_slice(&[v as f32]), &x).unwrap();
            let d = match prev {
                None => v,
                Some(p) => 2.0 * v - p,
            };
            want += d * (sig[i + 1] - sig[i]);
            prev = Some(v);
            let got = f64::try_from(&x).unwrap();
            assert!((got - want).abs() < 1e-6, "step {i}: {got} vs {want}");
        }
        assert!(ge.step(&Tensor::from_slice(&[0f32]), &x).is_err(), "no step past the schedule");
    }

    /// On a straight path (the same velocity every step) it is Euler's exact answer; starting
    /// part way forgets the last velocity.
    #[test]
    fn a_constant_velocity_is_followed_exactly_and_a_restart_is_euler() {
        let sched = FlowMatchEuler::new(4, 3.0).schedule().clone();
        let mut ge = GradientEstimation::over(sched.clone());
        let (v, x0) = (Tensor::from_slice(&[0.3f32, -1.2]), Tensor::from_slice(&[1.0f32, 2.0]));
        let mut x = x0.shallow_clone();
        for _ in 0..4 {
            x = ge.step(&v, &x).unwrap();
        }
        let exact = &x0 - &v * sched.sigmas[0] as f64;
        assert!(f64::try_from((&x - exact).abs().max()).unwrap() < 1e-6);
        let mut ge = GradientEstimation::over(sched.clone());
        ge.begin_at(2).unwrap();
        let y = ge.step(&Tensor::from_slice(&[1.0f32, 1.0]), &x0).unwrap();
        let euler = &x0 + (sched.sigmas[3] - sched.sigmas[2]) as f64;
        assert!(f64::try_from((&y - euler).abs().max()).unwrap() < 1e-6);
    }
}
