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

    /// Several projections of the same input as one (outputs concatenated in order), so they
    /// run as one GEMM. All parts must agree on having a bias.
    pub fn concat(parts: &[Linear]) -> Self {
        let weight = Tensor::cat(&parts.iter().map(|p| &p.weight).collect::<Vec<_>>(), 0);
        let bias = parts.iter().map(|p| p.bias.as_ref()).collect::<Option<Vec<_>>>().map(|b| Tensor::cat(&b, 0));
        Self { weight, bias }
    }

    pub fn forward(&self, x: &Tensor) -> Tensor {
        x.linear(&self.weight, self.bias.as_ref())
    }

    /// `gelu_tanh(x W^T + b)`. (cuBLASLt's GELU epilogue, `torch._addmm_activation`, was tried
    /// here to save a pass over the FFN's wide output: inside the model on the H200 it moved the
    /// output 0.176 away from fp32, against 0.015 for the two ops; docs/benchmarks.md.)
    pub fn forward_gelu_tanh(&self, x: &Tensor) -> Tensor {
        self.forward(x).gelu("tanh")
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
