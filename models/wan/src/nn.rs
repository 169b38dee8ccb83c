//! The few layers the Wan family needs, as plain structs holding checkpoint tensors.

use anyhow::Result;
use tch::{Device, Tensor};

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

    /// `gelu_tanh(x W^T + b)`. On CUDA the activation runs in the GEMM's epilogue (cuBLASLt,
    /// `torch._addmm_activation`), saving a pass over the (wide) output; elsewhere it is the
    /// same function in two ops.
    pub fn forward_gelu_tanh(&self, x: &Tensor) -> Tensor {
        if let (Device::Cuda(_), Some(bias)) = (x.device(), &self.bias) {
            let s = x.size();
            let rows: i64 = s[..s.len() - 1].iter().product();
            let x2 = x.reshape([rows, s[s.len() - 1]]);
            let out = bias.internal_addmm_activation(&x2, &self.weight.tr(), true);
            let mut shape = s[..s.len() - 1].to_vec();
            shape.push(self.weight.size()[0]);
            return out.view(shape.as_slice());
        }
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
