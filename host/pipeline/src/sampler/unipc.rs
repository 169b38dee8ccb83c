use anyhow::Result;
use tch::Tensor;

use super::schedule::{linspace, shift_sigma, Sampler, Schedule, NUM_TRAIN_TIMESTEPS};

/// The subset of diffusers' `UniPCMultistepScheduler` options that flow-matching models use.
#[derive(Debug, Clone)]
pub struct UniPcConfig {
    /// Timestep shift applied to the flow sigmas (diffusers `flow_shift`).
    pub flow_shift: f64,
    /// Model outputs the multistep update uses at most (diffusers `solver_order`).
    pub solver_order: usize,
    /// Use first order on the last steps (diffusers default, and Wan's).
    pub lower_order_final: bool,
}

impl Default for UniPcConfig {
    /// Wan 2.1's scheduler config: bh2, order 2, flow prediction, flow sigmas, shift 3.0 (480p).
    fn default() -> Self {
        Self { flow_shift: 3.0, solver_order: 2, lower_order_final: true }
    }
}

/// UniPC multistep (bh2 variant, predict-x0, `flow_prediction`, `use_flow_sigmas`,
/// `final_sigmas_type = "zero"`), matching diffusers step for step: the UniC corrector refines the
/// current sample with the new model output, then the UniP predictor takes the step.
pub struct UniPc {
    cfg: UniPcConfig,
    schedule: Schedule,
    /// Converted (x0) model outputs of the last `solver_order` steps, oldest first.
    history: Vec<Tensor>,
    lower_order_nums: usize,
    last_sample: Option<Tensor>,
    this_order: usize,
}

impl UniPc {
    /// The solver and its schedule for `steps` steps.
    pub fn new(cfg: UniPcConfig, steps: usize) -> Self {
        let n = NUM_TRAIN_TIMESTEPS as f64;
        let mut s: Vec<f64> = linspace(1.0, 1.0 / n, steps + 1);
        s.pop();
        Self::with_base_sigmas(cfg, s)
    }

    /// The solver over caller-given base sigmas (one per step, before the shift), as diffusers'
    /// `set_timesteps(sigmas=...)` with flow sigmas: Cosmos3's native flow schedule
    /// `linspace(1 - 1/1000, 0, N + 1)[:-1]`.
    pub fn with_base_sigmas(cfg: UniPcConfig, base: Vec<f64>) -> Self {
        let n = NUM_TRAIN_TIMESTEPS as f64;
        let mut s: Vec<f64> = base.into_iter().map(|x| shift_sigma(x, cfg.flow_shift)).collect();
        if (s[0] - 1.0).abs() < 1e-6 {
            s[0] -= 1e-6;
        }
        // diffusers casts the float64 timesteps to int64 (truncation).
        let timesteps = s.iter().map(|x| (x * n) as i64 as f32).collect();
        let mut sigmas: Vec<f32> = s.iter().map(|&x| x as f32).collect();
        sigmas.push(0.0);
        Self {
            cfg,
            schedule: Schedule { timesteps, sigmas, index: 0 },
            history: Vec::new(),
            lower_order_nums: 0,
            last_sample: None,
            this_order: 1,
        }
    }

    /// `lambda = log(alpha) - log(sigma)` with flow sigmas (`alpha = 1 - sigma`).
    fn lambda(&self, i: usize) -> f64 {
        let s = self.schedule.sigmas[i] as f64;
        (1.0 - s).ln() - s.ln()
    }

    /// Shared coefficients of the bh2 update from sigma index `s0` to `t`, with `prev` the
    /// indices of older outputs used (their ratios `rks` end with 1).
    fn coefficients(&self, t: usize, s0: usize, prev: &[usize], order: usize) -> Coeffs {
        let h = self.lambda(t) - self.lambda(s0);
        let mut rks: Vec<f64> = prev.iter().map(|&si| (self.lambda(si) - self.lambda(s0)) / h).collect();
        rks.push(1.0);
        let hh = -h;
        let h_phi_1 = hh.exp_m1();
        let b_h = hh.exp_m1();
        let mut h_phi_k = h_phi_1 / hh - 1.0;
        let mut factorial = 1.0;
        let mut b = Vec::with_capacity(order);
        for i in 1..=order {
            b.push(h_phi_k * factorial / b_h);
            factorial *= (i + 1) as f64;
            h_phi_k = h_phi_k / hh - 1.0 / factorial;
        }
        Coeffs { t, s0, h_phi_1, b_h, rks, b }
    }

    /// `x_t = sigma_t/sigma_s0 * x - alpha_t * h_phi_1 * m0 - alpha_t * B_h * Σ rho_k D_k`.
    fn combine(&self, c: &Coeffs, x: &Tensor, m0: &Tensor, terms: &[(f64, Tensor)]) -> Tensor {
        let sigma_t = self.schedule.sigmas[c.t] as f64;
        let alpha_t = 1.0 - sigma_t;
        let mut out = x * (sigma_t / self.schedule.sigmas[c.s0] as f64) - m0 * (alpha_t * c.h_phi_1);
        for (rho, d) in terms {
            out -= d * (alpha_t * c.b_h * rho);
        }
        out
    }

    /// UniP: predicts the sample at `index + 1` from the history.
    fn predict(&self, x: &Tensor, order: usize) -> Tensor {
        let i = self.schedule.index;
        let m0 = self.history.last().expect("history has the current output");
        let prev: Vec<usize> = (1..order).map(|k| i - k).collect();
        let c = self.coefficients(i + 1, i, &prev, order);
        let d1s: Vec<Tensor> =
            (1..order).map(|k| (&self.history[self.history.len() - 1 - k] - m0) / c.rks[k - 1]).collect();
        let rhos: Vec<f64> = match order {
            1 => vec![],
            2 => vec![0.5],
            _ => solve(vandermonde(&c.rks[..order - 1], order - 1), c.b[..order - 1].to_vec()),
        };
        let terms: Vec<(f64, Tensor)> = rhos.into_iter().zip(d1s).collect();
        self.combine(&c, x, m0, &terms)
    }

    /// UniC: corrects the current sample (reached from `last_sample`) using `model_t`, the
    /// converted output at the current index.
    fn correct(&self, model_t: &Tensor, last_sample: &Tensor, order: usize) -> Tensor {
        let i = self.schedule.index;
        let m0 = self.history.last().expect("history has the previous output");
        let prev: Vec<usize> = (1..order).map(|k| i - (k + 1)).collect();
        let c = self.coefficients(i, i - 1, &prev, order);
        let mut terms: Vec<(f64, Tensor)> = Vec::new();
        let rho_last = if order == 1 {
            0.5
        } else {
            let rhos = solve(vandermonde(&c.rks, order), c.b.clone());
            for k in 1..order {
                let d = (&self.history[self.history.len() - 1 - k] - m0) / c.rks[k - 1];
                terms.push((rhos[k - 1], d));
            }
            rhos[order - 1]
        };
        terms.push((rho_last, model_t - m0));
        self.combine(&c, last_sample, m0, &terms)
    }
}

impl Sampler for UniPc {
    fn begin_at(&mut self, index: usize) -> Result<()> {
        self.schedule.begin_at(index, "unipc")
    }
    fn schedule(&self) -> &Schedule {
        &self.schedule
    }
    fn step(&mut self, model_output: &Tensor, sample: &Tensor) -> Result<Tensor> {
        self.schedule.ensure_step_left("unipc")?;
        let steps = self.schedule.timesteps.len();
        // flow_prediction + predict_x0: x0 = sample - sigma * v.
        let x0 = sample - model_output * self.schedule.sigmas[self.schedule.index] as f64;
        let sample = match &self.last_sample {
            Some(last) if self.schedule.index > 0 => self.correct(&x0, last, self.this_order),
            _ => sample.shallow_clone(),
        };
        self.history.push(x0);
        if self.history.len() > self.cfg.solver_order {
            drop(self.history.remove(0));
        }
        let order = if self.cfg.lower_order_final {
            self.cfg.solver_order.min(steps - self.schedule.index)
        } else {
            self.cfg.solver_order
        };
        self.this_order = order.min(self.lower_order_nums + 1);
        let prev = self.predict(&sample, self.this_order);
        self.last_sample = Some(sample);
        if self.lower_order_nums < self.cfg.solver_order {
            self.lower_order_nums += 1;
        }
        self.schedule.index += 1;
        Ok(prev)
    }
}

/// Coefficients of one bh2 update (see [`UniPc::coefficients`]).
struct Coeffs {
    t: usize,
    s0: usize,
    h_phi_1: f64,
    b_h: f64,
    rks: Vec<f64>,
    b: Vec<f64>,
}

/// Rows `rks^0, rks^1, ...` (diffusers' `R`), `n x n`.
fn vandermonde(rks: &[f64], n: usize) -> Vec<Vec<f64>> {
    (0..n).map(|p| rks[..n].iter().map(|r| r.powi(p as i32)).collect()).collect()
}

/// Solves the small dense system `a x = b` by Gaussian elimination with partial pivoting.
fn solve(mut a: Vec<Vec<f64>>, mut b: Vec<f64>) -> Vec<f64> {
    let n = b.len();
    for c in 0..n {
        let p = (c..n).max_by(|&i, &j| a[i][c].abs().total_cmp(&a[j][c].abs())).unwrap();
        a.swap(c, p);
        b.swap(c, p);
        for r in c + 1..n {
            let f = a[r][c] / a[c][c];
            let pivot = a[c].clone();
            for (v, p) in a[r].iter_mut().zip(&pivot).skip(c) {
                *v -= f * p;
            }
            b[r] -= f * b[c];
        }
    }
    let mut x = vec![0.0; n];
    for r in (0..n).rev() {
        let s: f64 = (r + 1..n).map(|k| a[r][k] * x[k]).sum();
        x[r] = (b[r] - s) / a[r][r];
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn solve_matches_a_known_system() {
        let x = solve(vec![vec![1.0, 1.0], vec![0.5, 1.0]], vec![3.0, 2.0]);
        assert!((x[0] - 2.0).abs() < 1e-12 && (x[1] - 1.0).abs() < 1e-12, "{x:?}");
    }
}
