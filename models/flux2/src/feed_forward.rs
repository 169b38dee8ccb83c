//! `Flux2FeedForward`: one projection to twice the hidden width, SwiGLU (`silu(first half) ·
//! second half`), and the projection back.

use anyhow::Result;
use fastvideo_layers::joint::linear;
use fastvideo_layers::{Linear, Lora};
use fastvideo_torch::weights::Weights;
use tch::Tensor;

/// The feed-forward at `ff` / `ff_context`.
pub struct FeedForward {
    linear_in: Linear,
    linear_out: Linear,
}

/// `silu(x[.., :h]) · x[.., h:]` of a doubled projection.
pub fn swiglu(x: &Tensor) -> Tensor {
    if let Some(y) = fastvideo_kernels::swiglu::silu_mul(x) {
        return y;
    }
    let parts = x.chunk(2, -1);
    parts[0].silu() * &parts[1]
}

impl FeedForward {
    /// The module at `w` of width `dim` with hidden width `hidden`.
    pub fn new(w: &Weights, dim: i64, hidden: i64) -> Result<Self> {
        Ok(Self {
            linear_in: Linear::new(&w.pp("linear_in"), dim, 2 * hidden, false)?,
            linear_out: Linear::new(&w.pp("linear_out"), hidden, dim, false)?,
        })
    }

    /// `x [.., dim]` through it, its rows with their adapters (`lora`).
    pub fn forward(&self, x: &Tensor, lora: Lora) -> Tensor {
        linear(&self.linear_out, &swiglu(&linear(&self.linear_in, x, lora)), lora)
    }

    /// Its linears.
    pub fn linears<'a>(&'a self, out: &mut Vec<&'a Linear>) {
        out.extend([&self.linear_in, &self.linear_out]);
    }
}
