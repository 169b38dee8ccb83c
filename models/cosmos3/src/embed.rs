//! What turns each modality into generation tokens and back: the vision patchifier (2×2
//! patches flattened `(p_h, p_w, C)`, odd latent sizes zero-padded), the timestep embedder
//! (float32, added only to noisy tokens), and `DomainAwareLinear`, the action heads with one
//! weight per embodiment.

use anyhow::{ensure, Result};
use fastvideo_layers::Linear;
use fastvideo_torch::weights::Weights;
use tch::{Kind, Tensor};

/// Patch tokens `[T·hp·wp, p·p·C]` of a latent `[C, T, h, w]` (zero-padded to multiples of `p`).
pub fn patchify(latent: &Tensor, p: i64) -> Tensor {
    let (c, t, h, w) = latent.size4().expect("[C, T, h, w]");
    let (hp, wp) = ((h + p - 1) / p, (w + p - 1) / p);
    let x = if hp * p != h || wp * p != w {
        latent.constant_pad_nd([0, wp * p - w, 0, hp * p - h])
    } else {
        latent.shallow_clone()
    };
    x.reshape([c, t, hp, p, wp, p]).permute([1, 2, 4, 3, 5, 0]).reshape([t * hp * wp, p * p * c])
}

/// The latent `[C, frames, h, w]` of patch tokens `[frames·hp·wp, p·p·C]`, cropped to `h, w`.
pub fn unpatchify(tokens: &Tensor, c: i64, frames: i64, h: i64, w: i64, p: i64) -> Tensor {
    let (hp, wp) = ((h + p - 1) / p, (w + p - 1) / p);
    tokens
        .reshape([frames, hp, wp, p, p, c])
        .permute([5, 0, 1, 3, 2, 4])
        .reshape([c, frames, hp * p, wp * p])
        .narrow(2, 0, h)
        .narrow(3, 0, w)
}

/// `TimestepEmbedding(256 → hidden)` over sinusoidal features, in float32.
pub struct TimeEmbedder {
    linear_1: Linear,
    linear_2: Linear,
    scale: f64,
}

impl TimeEmbedder {
    /// Reads `time_embedder.linear_{1,2}` under `w` (kept float32, as diffusers keeps them).
    pub fn new(w: &Weights, hidden: i64, scale: f64) -> Result<Self> {
        let w = w.with_kind(Kind::Float);
        Ok(Self {
            linear_1: Linear::new(&w.pp("linear_1"), 256, hidden, true)?,
            linear_2: Linear::new(&w.pp("linear_2"), hidden, hidden, true)?,
            scale,
        })
    }

    /// Bytes of its weights.
    pub fn bytes(&self) -> u64 {
        self.linear_1.bytes() + self.linear_2.bytes()
    }

    /// The embedding `[1, hidden]` of the scheduler's timestep `t`, in `kind`.
    pub fn forward(&self, t: f64, kind: Kind, device: tch::Device) -> Tensor {
        let t = Tensor::from_slice(&[t as f32]).to_device(device) * self.scale;
        let f = fastvideo_layers::timestep::sinusoidal(&t, 256);
        self.linear_2.forward(&self.linear_1.forward(&f).silu()).to_kind(kind)
    }
}

/// A linear map per embodiment domain: `y = x @ fc[d].view(in, out) + bias[d]` (note `[in, out]`,
/// not `nn.Linear`'s `[out, in]`).
pub struct DomainAwareLinear {
    fc: Tensor,
    bias: Tensor,
    input: i64,
    output: i64,
}

impl DomainAwareLinear {
    /// Reads `fc.weight [domains, in·out]`, `bias.weight [domains, out]` under `w`.
    pub fn new(w: &Weights, input: i64, output: i64, domains: i64) -> Result<Self> {
        Ok(Self {
            fc: w.get("fc.weight", &[domains, input * output])?,
            bias: w.get("bias.weight", &[domains, output])?,
            input,
            output,
        })
    }

    /// Bytes of its weights.
    pub fn bytes(&self) -> u64 {
        fastvideo_layers::tensor_bytes(&self.fc) + fastvideo_layers::tensor_bytes(&self.bias)
    }

    /// Domains the table has.
    pub fn domains(&self) -> i64 {
        self.fc.size()[0]
    }

    /// `x [N, in]` through domain `d`'s map.
    pub fn forward(&self, x: &Tensor, d: i64) -> Result<Tensor> {
        ensure!((0..self.domains()).contains(&d), "action domain id {d} is not in [0, {})", self.domains());
        let w = self.fc.get(d).view([self.input, self.output]);
        Ok(x.matmul(&w) + self.bias.get(d))
    }
}
