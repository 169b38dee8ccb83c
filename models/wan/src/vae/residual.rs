//! `WanRMS_norm` and the residual block built on it (norm, SiLU, causal conv, twice, plus the
//! shortcut).

use anyhow::Result;
use tch::{Kind, Tensor};

use super::cache::FeatCache;
use super::conv::CausalConv3d;
use crate::weights::Weights;

/// `WanRMS_norm`: L2-normalize over channels, times `sqrt(C) * gamma`.
pub(super) struct RmsNorm {
    /// `sqrt(C) * gamma`, folded once at load.
    gain: Tensor,
}

impl RmsNorm {
    /// `rank` is 5 for video activations, 4 for the per-frame attention.
    pub(super) fn new(w: &Weights, dim: i64, rank: usize) -> Result<Self> {
        let mut shape = vec![dim];
        shape.resize(rank - 1, 1);
        Ok(Self { gain: w.get("gamma", &shape)? * (dim as f64).sqrt() })
    }
    /// `x / max(|x|, 1e-12)` as `x * rsqrt(max(sum x², 1e-24))`: the same value, and libtorch's
    /// `norm` over the strided channel axis is ~20× slower on the CPU than a squared sum there.
    /// Half-precision inputs are normalised in float32 and cast back, as diffusers ≥ 0.38 does.
    pub(super) fn forward(&self, x: &Tensor) -> Tensor {
        let kind = x.kind();
        let xf = if matches!(kind, Kind::BFloat16 | Kind::Half) { x.to_kind(Kind::Float) } else { x.shallow_clone() };
        let inv = xf.square().sum_dim_intlist([1i64].as_slice(), true, None::<Kind>).clamp_min(1e-24).rsqrt();
        (xf * inv).to_kind(kind) * &self.gain
    }
}

pub(super) struct ResidualBlock {
    norm1: RmsNorm,
    conv1: CausalConv3d,
    norm2: RmsNorm,
    conv2: CausalConv3d,
    shortcut: Option<CausalConv3d>,
}

impl ResidualBlock {
    pub(super) fn new(w: &Weights, cin: i64, cout: i64) -> Result<Self> {
        Ok(Self {
            norm1: RmsNorm::new(&w.pp("norm1"), cin, 5)?,
            conv1: CausalConv3d::cube(&w.pp("conv1"), cin, cout)?,
            norm2: RmsNorm::new(&w.pp("norm2"), cout, 5)?,
            conv2: CausalConv3d::cube(&w.pp("conv2"), cout, cout)?,
            shortcut: if cin != cout {
                Some(CausalConv3d::pointwise(&w.pp("conv_shortcut"), cin, cout)?)
            } else {
                None
            },
        })
    }
    pub(super) fn forward(&self, x: &Tensor, cache: &mut FeatCache) -> Tensor {
        let h = match &self.shortcut {
            Some(s) => s.forward(x, None),
            None => x.shallow_clone(),
        };
        let x = self.conv1.cached(&self.norm1.forward(x).silu(), cache);
        let x = self.conv2.cached(&self.norm2.forward(&x).silu(), cache);
        x + h
    }
}
