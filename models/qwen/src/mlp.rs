//! The SwiGLU feed-forward: `down(silu(gate(x)) · up(x))`, gate and up as one matmul.

use anyhow::Result;
use fastvideo_layers::Linear;
use fastvideo_torch::weights::Weights;
use tch::Tensor;

/// The SwiGLU feed-forward of one layer.
pub struct Mlp {
    /// gate then up, `[2 · inner, hidden]`: one launch instead of two.
    gate_up: Linear,
    down: Linear,
    inner: i64,
}

impl Mlp {
    /// Reads `gate_proj`, `up_proj` and `down_proj` under `w`, fusing gate and up.
    pub fn new(w: &Weights, hidden: i64, inner: i64) -> Result<Self> {
        let part = |name: &str| Linear::new(&w.pp(name), hidden, inner, false);
        Ok(Self {
            gate_up: Linear::concat(vec![part("gate_proj")?, part("up_proj")?]),
            down: Linear::new(&w.pp("down_proj"), inner, hidden, false)?,
            inner,
        })
    }

    /// From fused gate-and-up and down linears another model holds (shared, not copied).
    pub(crate) fn from_parts(gate_up: Linear, down: Linear, inner: i64) -> Self {
        Self { gate_up, down, inner }
    }

    fn hidden(&self, x: &Tensor) -> Tensor {
        let gu = self.gate_up.forward(x);
        gu.narrow(-1, 0, self.inner).silu() * gu.narrow(-1, self.inner, self.inner)
    }

    /// `down(silu(gate(x)) · up(x))` as a new tensor.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        self.down.forward(&self.hidden(x))
    }

    /// [`Self::forward`] added into `residual` in place (the add rides the down projection).
    pub fn forward_add(&self, residual: &Tensor, x: &Tensor) {
        self.down.forward_add(residual, &self.hidden(x));
    }
}
