//! Sinusoidal timestep features as diffusers' `Timesteps(dim, flip_sin_to_cos=True,
//! downscale_freq_shift=0)` computes them: `[cos | sin]` of `t · 10000^(-i/half)`, float32.

use tch::{Kind, Tensor};

/// Features `[N, dim]` float32 of timesteps `t [N]`.
pub fn sinusoidal(t: &Tensor, dim: i64) -> Tensor {
    let half = dim / 2;
    let exponent = Tensor::arange(half, (Kind::Float, t.device())) * (-(10000f64.ln()) / half as f64);
    let args = t.to_kind(Kind::Float).unsqueeze(1) * exponent.exp().unsqueeze(0);
    Tensor::cat(&[args.cos(), args.sin()], -1)
}
