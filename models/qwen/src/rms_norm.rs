//! RMSNorm as transformers' Qwen3RMSNorm computes it: the mean square in float32, the
//! normalised value rounded back to the input's dtype, then scaled by the weight.

use anyhow::Result;
use fastvideo_torch::weights::Weights;
use tch::Tensor;

/// RMSNorm rounded where transformers rounds (mean square in float32, the normalised value in the
/// input's dtype), so outputs match the reference.
pub struct RmsNorm {
    /// `[dim]`, or `[heads, dim]` for per-head norms run as one ([`Self::over_heads`]).
    weight: Tensor,
    eps: f64,
}

impl RmsNorm {
    /// Reads `weight` `[dim]` under `w`.
    pub fn new(w: &Weights, dim: i64, eps: f64) -> Result<Self> {
        Ok(Self { weight: w.get("weight", &[dim])?, eps })
    }

    /// A norm of `weight` (held elsewhere too: not copied).
    pub(crate) fn from_weight(weight: Tensor, eps: f64) -> Self {
        Self { weight, eps }
    }

    /// Per-head norms of several head groups as one norm over `[.., Σ heads, dim]`: each norm's
    /// weight repeated over its group's heads, so q and k normalise in one launch, not two.
    pub fn over_heads(groups: &[(RmsNorm, i64)]) -> Self {
        let rows: Vec<Tensor> =
            groups.iter().map(|(n, heads)| n.weight.unsqueeze(0).expand([*heads, -1], false)).collect();
        Self { weight: Tensor::cat(&rows, 0), eps: groups[0].0.eps }
    }

    /// Normalises over the last dimension. libtorch's `rms_norm` is one fused kernel on CUDA
    /// (float32 statistics, the result in the input's dtype) and transformers' ops on the CPU;
    /// the weight is applied after, in the input's dtype, as transformers rounds.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        let dim = *x.size().last().expect("rank >= 1");
        x.rms_norm([dim], None::<&Tensor>, self.eps) * &self.weight
    }
}
