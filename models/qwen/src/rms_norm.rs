//! RMSNorm as transformers' Qwen3RMSNorm computes it: the mean square in float32, the
//! normalised value rounded back to the input's dtype, then scaled by the weight.

use anyhow::Result;
use fastvideo_torch::weights::Weights;
use tch::{Kind, Tensor};

pub struct RmsNorm {
    weight: Tensor,
    eps: f64,
}

impl RmsNorm {
    pub fn new(w: &Weights, dim: i64, eps: f64) -> Result<Self> {
        Ok(Self { weight: w.get("weight", &[dim])?, eps })
    }

    /// Normalises over the last dimension.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        let h = x.to_kind(Kind::Float);
        let var = h.square().mean_dim(-1, true, Kind::Float);
        (h * (var + self.eps).rsqrt()).to_kind(x.kind()) * &self.weight
    }
}
