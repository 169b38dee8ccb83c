//! The few layers the Wan family needs, as plain structs holding checkpoint tensors.

use anyhow::Result;
use tch::Tensor;

use crate::weights::Weights;

/// `nn.Linear` (`weight` is `[out, in]`).
pub struct Linear {
    pub weight: Tensor,
    pub bias: Option<Tensor>,
}

impl Linear {
    pub fn new(w: &Weights, in_dim: i64, out_dim: i64, bias: bool) -> Result<Self> {
        let weight = w.get("weight", &[out_dim, in_dim])?;
        let bias = if bias { Some(w.get("bias", &[out_dim])?) } else { None };
        Ok(Self { weight, bias })
    }
    pub fn forward(&self, x: &Tensor) -> Tensor {
        x.linear(&self.weight, self.bias.as_ref())
    }
}

/// `nn.LayerNorm` over the last dim, optionally affine.
pub struct LayerNorm {
    dim: i64,
    eps: f64,
    weight: Option<Tensor>,
    bias: Option<Tensor>,
}

impl LayerNorm {
    pub fn plain(dim: i64, eps: f64) -> Self {
        Self { dim, eps, weight: None, bias: None }
    }
    pub fn affine(w: &Weights, dim: i64, eps: f64) -> Result<Self> {
        Ok(Self { dim, eps, weight: Some(w.get("weight", &[dim])?), bias: Some(w.get("bias", &[dim])?) })
    }
    pub fn forward(&self, x: &Tensor) -> Tensor {
        x.layer_norm([self.dim], self.weight.as_ref(), self.bias.as_ref(), self.eps, true)
    }
}

/// `nn.RMSNorm` over the last dim: `x * rsqrt(mean(x^2) + eps) * weight`.
pub struct RmsNorm {
    dim: i64,
    eps: f64,
    weight: Tensor,
}

impl RmsNorm {
    pub fn new(w: &Weights, dim: i64, eps: f64) -> Result<Self> {
        Ok(Self { dim, eps, weight: w.get("weight", &[dim])? })
    }
    pub fn forward(&self, x: &Tensor) -> Tensor {
        x.rms_norm([self.dim], Some(&self.weight), self.eps)
    }
}

/// `[B, N, H*D] -> [B, H, N, D]`.
pub fn split_heads(x: &Tensor, heads: i64) -> Tensor {
    let (b, n, _) = x.size3().expect("rank-3 activations");
    x.view([b, n, heads, -1]).transpose(1, 2)
}

/// `[B, H, N, D] -> [B, N, H*D]`.
pub fn merge_heads(x: &Tensor) -> Tensor {
    let (b, _, n, _) = x.size4().expect("rank-4 activations");
    x.transpose(1, 2).contiguous().view([b, n, -1])
}
