//! The SwiGLU feed-forward: `down(silu(gate(x)) · up(x))`.

use anyhow::Result;
use fastvideo_torch::weights::Weights;
use tch::Tensor;

use crate::attention::Linear;

pub struct Mlp {
    gate: Linear,
    up: Linear,
    down: Linear,
}

impl Mlp {
    pub fn new(w: &Weights, hidden: i64, inner: i64) -> Result<Self> {
        Ok(Self {
            gate: Linear::new(&w.pp("gate_proj"), hidden, inner, false)?,
            up: Linear::new(&w.pp("up_proj"), hidden, inner, false)?,
            down: Linear::new(&w.pp("down_proj"), inner, hidden, false)?,
        })
    }

    pub fn forward(&self, x: &Tensor) -> Tensor {
        self.down.forward(&(self.gate.forward(x).silu() * self.up.forward(x)))
    }
}
