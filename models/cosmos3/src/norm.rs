//! The two RMSNorms of Cosmos3 layouts: diffusers' `RMSNorm` (Nano/Super: float32 statistics,
//! the normalised value back in the input's dtype, then the weight) and
//! `Cosmos3NemotronRMSNorm` (Edge: the weight applied in float32, then cast). Equal in float32.

use anyhow::Result;
use fastvideo_torch::weights::Weights;
use tch::{Kind, Tensor};

use crate::config::Activation;

/// An RMSNorm over the last dimension.
pub struct RmsNorm {
    weight: Tensor,
    eps: f64,
    nemotron: bool,
}

impl RmsNorm {
    /// Reads `weight [dim]` under `w`; the flavour follows the layout's activation.
    pub fn new(w: &Weights, dim: i64, eps: f64, act: Activation) -> Result<Self> {
        Ok(Self { weight: w.get("weight", &[dim])?, eps, nemotron: act == Activation::Relu2 })
    }

    /// Its weight (shared, not copied).
    pub fn weight(&self) -> Tensor {
        self.weight.shallow_clone()
    }

    /// Its epsilon.
    pub fn eps(&self) -> f64 {
        self.eps
    }

    /// Bytes of its weight.
    pub fn bytes(&self) -> u64 {
        fastvideo_layers::tensor_bytes(&self.weight)
    }

    /// Normalises `x` over its last dimension.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        let dim = *x.size().last().expect("rank >= 1");
        if self.nemotron && x.kind() != Kind::Float {
            let y = x.to_kind(Kind::Float).rms_norm([dim], None::<&Tensor>, self.eps);
            return (y * self.weight.to_kind(Kind::Float)).to_kind(x.kind());
        }
        if x.device().is_cuda() {
            // One fused kernel with the weight (rounded once, not after the norm and again after
            // the weight): a pass over the stream fewer.
            return x.rms_norm([dim], Some(&self.weight), self.eps);
        }
        x.rms_norm([dim], None::<&Tensor>, self.eps) * &self.weight
    }
}
