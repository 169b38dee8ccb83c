//! SnakeBeta with log-scale parameters (diffusers `Snake1d`, `logscale=True`):
//! `x + 1/(exp(β)+1e-9) · sin(exp(α)·x)²` per channel. Both factors depend only on the weights,
//! so they are computed once at load.

use anyhow::Result;
use fastvideo_torch::weights::Weights;
use tch::Tensor;

/// One SnakeBeta activation over `[B, C, T]`.
pub struct Snake {
    /// `exp(α)`, `[1, C, 1]`.
    alpha: Tensor,
    /// `1 / (exp(β) + 1e-9)`, `[1, C, 1]`.
    inv_beta: Tensor,
}

impl Snake {
    /// Reads `alpha`, `beta` (`[1, channels, 1]`) under `w`.
    pub fn new(w: &Weights, channels: i64) -> Result<Self> {
        let f = w.with_kind(super::fold_kind(w.kind()));
        let alpha = f.get("alpha", &[1, channels, 1])?.exp();
        let inv_beta = (f.get("beta", &[1, channels, 1])?.exp() + 1e-9).reciprocal();
        Ok(Self { alpha: alpha.to_kind(w.kind()), inv_beta: inv_beta.to_kind(w.kind()) })
    }

    /// The activation of `x [B, C, T]`.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        x + &self.inv_beta * (&self.alpha * x).sin().square()
    }
}
