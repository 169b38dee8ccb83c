//! The timestep embedding and the modulations it drives: one embedding of the (model) time
//! per sample, turned into shift/scale/gate triples for the double-stream image and text
//! paths, the single-stream blocks and the output norm.

use anyhow::Result;
use fastvideo_layers::joint::linear;
use fastvideo_layers::timestep::sinusoidal;
use fastvideo_layers::{Linear, Lora};
use fastvideo_torch::weights::Weights;
use tch::Tensor;

pub use fastvideo_layers::joint::Mod;

/// `Flux2TimestepGuidanceEmbeddings` without a guidance embedder (klein has none).
pub struct TimeEmbed {
    channels: i64,
    linear_1: Linear,
    linear_2: Linear,
}

impl TimeEmbed {
    /// The module at `w` (`time_guidance_embed`).
    pub fn new(w: &Weights, channels: i64, dim: i64) -> Result<Self> {
        let e = w.pp("timestep_embedder");
        Ok(Self {
            channels,
            linear_1: Linear::new(&e.pp("linear_1"), channels, dim, false)?,
            linear_2: Linear::new(&e.pp("linear_2"), dim, dim, false)?,
        })
    }

    /// `[B, dim]` of model times `t [B]` (the sampler's timestep, 0..1000) in `kind`, each
    /// sample's row with its adapters (`lora`).
    pub fn forward(&self, t: &Tensor, kind: tch::Kind, lora: Lora) -> Tensor {
        let proj = sinusoidal(t, self.channels).to_kind(kind);
        linear(&self.linear_2, &linear(&self.linear_1, &proj, lora).silu(), lora)
    }

    /// Its linears.
    pub fn linears<'a>(&'a self, out: &mut Vec<&'a Linear>) {
        out.extend([&self.linear_1, &self.linear_2]);
    }
}

/// `Flux2Modulation`: `linear(silu(temb))`, split into `sets` triples (shift, scale, gate).
pub struct Modulation {
    linear: Linear,
    sets: i64,
}

impl Modulation {
    /// The module at `w` producing `sets` triples of width `dim`.
    pub fn new(w: &Weights, dim: i64, sets: i64) -> Result<Self> {
        Ok(Self { linear: Linear::new(&w.pp("linear"), dim, dim * 3 * sets, false)?, sets })
    }

    /// The triples of `temb [B, dim]`.
    pub fn forward(&self, temb: &Tensor, lora: Lora) -> Vec<Mod> {
        Mod::split(&linear(&self.linear, &temb.silu(), lora), self.sets)
    }

    /// Its linear.
    pub fn linear(&self) -> &Linear {
        &self.linear
    }
}

/// `AdaLayerNormContinuous` of the output: `linear(silu(temb))` split into scale then shift.
pub struct OutputNorm {
    linear: Linear,
    eps: f64,
}

impl OutputNorm {
    /// The module at `w` (`norm_out`).
    pub fn new(w: &Weights, dim: i64, eps: f64) -> Result<Self> {
        Ok(Self { linear: Linear::new(&w.pp("linear"), dim, 2 * dim, false)?, eps })
    }

    /// Its linear.
    pub fn linear(&self) -> &Linear {
        &self.linear
    }

    /// The scale and shift `[B, 1, dim]` of `temb [B, dim]`.
    pub fn modulation(&self, temb: &Tensor, lora: Lora) -> (Tensor, Tensor) {
        let emb = linear(&self.linear, &temb.silu(), lora).unsqueeze(1);
        let parts = emb.chunk(2, -1);
        (parts[0].shallow_clone(), parts[1].shallow_clone())
    }

    /// `x [1, S, dim]` normalised and modulated by `scale` and `shift` (`[1, S or 1, dim]`).
    pub fn forward(&self, x: &Tensor, scale: Tensor, shift: Tensor) -> Tensor {
        Mod { scale, shift, gate: Tensor::new() }.modulate(x, self.eps)
    }
}
