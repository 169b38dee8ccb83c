//! The small modules around the blocks: `LTX2AdaLayerNormSingle` (a sinusoidal timestep
//! embedding and the modulations it drives), `PixArtAlphaTextProjection` (LTX-2.0's caption
//! projection), the GELU feed-forward and the norms.

use anyhow::Result;
use fastvideo_layers::linear::Lora;
use fastvideo_layers::timestep::sinusoidal;
use fastvideo_layers::Linear;
use fastvideo_torch::weights::Weights;
use tch::{Kind, Tensor};

/// `LTX2AdaLayerNormSingle`: `t` → sinusoid(256) → MLP → `embedded`; `linear(silu(embedded))`
/// gives `params` modulation vectors of width `dim`.
pub struct AdaLayerNormSingle {
    linear_1: Linear,
    linear_2: Linear,
    linear: Linear,
}

const TIME_CHANNELS: i64 = 256;

impl AdaLayerNormSingle {
    /// The module at `w` for width `dim` and `params` modulation vectors.
    pub fn new(w: &Weights, dim: i64, params: i64) -> Result<Self> {
        let e = w.pp("emb.timestep_embedder");
        Ok(Self {
            linear_1: Linear::new(&e.pp("linear_1"), TIME_CHANNELS, dim, true)?,
            linear_2: Linear::new(&e.pp("linear_2"), dim, dim, true)?,
            linear: Linear::new(&w.pp("linear"), dim, params * dim, true)?,
        })
    }

    /// `(modulation [B·T, params·dim], embedded [B·T, dim])` of times `t` (any shape, flattened),
    /// in `kind`, with `lora`'s deltas (rows of every width: see `AdapterRows::every`).
    pub fn forward(&self, t: &Tensor, kind: Kind, lora: Lora) -> (Tensor, Tensor) {
        let proj = sinusoidal(&t.flatten(0, -1), TIME_CHANNELS).to_kind(kind);
        let embedded = self.linear_2.forward_lora(&self.linear_1.forward_lora(&proj, lora).silu(), lora);
        (self.linear.forward_lora(&embedded.silu(), lora), embedded)
    }

    /// Its linears.
    pub fn linears<'a>(&'a self, out: &mut Vec<&'a Linear>) {
        out.extend([&self.linear_1, &self.linear_2, &self.linear]);
    }
}

/// `PixArtAlphaTextProjection`: two linears with a tanh GELU between.
pub struct TextProjection {
    linear_1: Linear,
    linear_2: Linear,
}

impl TextProjection {
    /// The module at `w` from `input` channels to `dim`.
    pub fn new(w: &Weights, input: i64, dim: i64) -> Result<Self> {
        Ok(Self {
            linear_1: Linear::new(&w.pp("linear_1"), input, dim, true)?,
            linear_2: Linear::new(&w.pp("linear_2"), dim, dim, true)?,
        })
    }

    /// `x [.., input]` → `[.., dim]`.
    pub fn forward(&self, x: &Tensor, lora: Lora) -> Tensor {
        self.linear_2.forward_lora(&self.linear_1.forward_gelu_tanh_lora(x, lora), lora)
    }

    /// Its linears.
    pub fn linears<'a>(&'a self, out: &mut Vec<&'a Linear>) {
        out.extend([&self.linear_1, &self.linear_2]);
    }
}

/// diffusers' `FeedForward` with `gelu-approximate`: `dim → 4·dim`, tanh GELU, back.
pub struct FeedForward {
    proj: Linear,
    out: Linear,
}

impl FeedForward {
    /// The module at `w` (`ff`, `audio_ff`).
    pub fn new(w: &Weights, dim: i64, bias: bool) -> Result<Self> {
        Ok(Self {
            proj: Linear::new(&w.pp("net.0.proj"), dim, 4 * dim, bias)?,
            out: Linear::new(&w.pp("net.2"), 4 * dim, dim, bias)?,
        })
    }

    /// `x [.., dim]` through it.
    pub fn forward(&self, x: &Tensor, lora: Lora) -> Tensor {
        self.out.forward_lora(&self.proj.forward_gelu_tanh_lora(x, lora), lora)
    }

    /// Its linears.
    pub fn linears<'a>(&'a self, out: &mut Vec<&'a Linear>) {
        out.extend([&self.proj, &self.out]);
    }
}

/// RMSNorm over the last dimension with float32 statistics (diffusers' `RMSNorm` and
/// `torch.nn.RMSNorm` agree on it), with a weight or without (`elementwise_affine = false`).
pub struct RmsNorm {
    weight: Option<Tensor>,
    eps: f64,
}

impl RmsNorm {
    /// The norm at `w`, reading `weight [dim]` when `affine`.
    pub fn new(w: &Weights, dim: i64, eps: f64, affine: bool) -> Result<Self> {
        Ok(Self { weight: affine.then(|| w.get("weight", &[dim])).transpose()?, eps })
    }

    /// Its weight (`None` without `elementwise_affine`).
    pub fn weight(&self) -> Option<&Tensor> {
        self.weight.as_ref()
    }

    /// Its epsilon.
    pub fn eps(&self) -> f64 {
        self.eps
    }

    /// `x` normalised over its last dimension.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        let xf = x.to_kind(Kind::Float);
        let y = (&xf * (xf.square().mean_dim(-1, true, Kind::Float) + self.eps).rsqrt()).to_kind(x.kind());
        match &self.weight {
            Some(w) => y * w,
            None => y,
        }
    }
}

/// `LayerNorm(dim, eps = 1e-6, elementwise_affine = false)`, the output heads' norm.
pub fn layer_norm(x: &Tensor) -> Tensor {
    let dim = *x.size().last().expect("rank >= 1");
    x.layer_norm([dim], None::<&Tensor>, None::<&Tensor>, 1e-6, false)
}

/// `table [n, dim] + temb [B, T, n·dim]` split into its `n` vectors `[B, T, dim]`
/// (`get_mod_params`).
pub fn mod_params(table: &Tensor, temb: &Tensor) -> Vec<Tensor> {
    let n = table.size()[0];
    let s = temb.size();
    let values = table.unsqueeze(0).unsqueeze(0) + temb.reshape([s[0], s[1], n, -1]);
    values.unbind(2)
}

/// [`mod_params`] summed in the model's dtype as the reference does, then held in float32: the
/// fused norm kernels read modulation vectors in fp32, all `n` as rows of one tensor.
pub fn mod_params_f32(table: &Tensor, temb: &Tensor) -> Vec<Tensor> {
    let n = table.size()[0];
    let s = temb.size();
    let values = table.unsqueeze(0).unsqueeze(0) + temb.reshape([s[0], s[1], n, -1]);
    values.to_kind(Kind::Float).unbind(2)
}

/// Vectors `[B, T, dim]` from different tables restacked as rows of one fp32 tensor, so one
/// kernel call can read them all with one stride (a few kilobytes per sample). Per-sample
/// (`T = 1`) and per-token vectors (image to video's timesteps) are broadcast to one shape first.
pub fn one_table(vectors: &[&Tensor]) -> Vec<Tensor> {
    let same = vectors.windows(2).all(|w| w[0].size() == w[1].size());
    let vectors = match same {
        true => vectors.iter().map(|t| t.shallow_clone()).collect(),
        false => Tensor::broadcast_tensors(vectors),
    };
    Tensor::stack(&vectors, 2).to_kind(Kind::Float).unbind(2)
}
