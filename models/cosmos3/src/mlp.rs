//! The feed-forward of either pathway: SwiGLU `down(silu(gate(x))·up(x))` (Nano/Super, gate and
//! up as one matmul) or `down(relu(up(x))²)` (Edge, no gate).

use anyhow::Result;
use fastvideo_layers::Linear;
use fastvideo_torch::weights::Weights;
use tch::Tensor;

use crate::config::Activation;

/// One pathway's MLP.
pub struct Mlp {
    /// `gate` then `up` (SwiGLU), or `up` alone (relu²).
    up: Linear,
    down: Linear,
    inner: i64,
    act: Activation,
}

impl Mlp {
    /// Reads `gate_proj` (SwiGLU only), `up_proj`, `down_proj` under `w`.
    pub fn new(w: &Weights, hidden: i64, inner: i64, act: Activation) -> Result<Self> {
        let part = |name: &str| Linear::new(&w.pp(name), hidden, inner, false);
        let up = match act {
            Activation::Silu => Linear::concat(vec![part("gate_proj")?, part("up_proj")?]),
            Activation::Relu2 => part("up_proj")?,
        };
        Ok(Self { up, down: Linear::new(&w.pp("down_proj"), inner, hidden, false)?, inner, act })
    }

    /// Its linears, shared: `(gate and up fused, down)`; `None` for relu² (no gate).
    pub fn shared(&self) -> Option<(Linear, Linear)> {
        (self.act == Activation::Silu).then(|| (self.up.share(), self.down.share()))
    }

    /// Bytes of its weights.
    pub fn bytes(&self) -> u64 {
        self.up.bytes() + self.down.bytes()
    }

    /// The MLP of `x`, added into `residual` in place.
    pub fn forward_add(&self, residual: &Tensor, x: &Tensor) {
        let u = self.up.forward(x);
        let h = match self.act {
            Activation::Silu => match fastvideo_kernels::swiglu::silu_mul(&u) {
                Some(h) => h,
                None => u.narrow(-1, 0, self.inner).silu() * u.narrow(-1, self.inner, self.inner),
            },
            Activation::Relu2 => u.relu().square(),
        };
        self.down.forward_add(residual, &h);
    }
}
