//! The layer stack the encoder and decoder share: conv in, a body of residual, attention and
//! resample layers, norm and conv out, all through one feature cache.

use anyhow::Result;
use tch::Tensor;

use super::attention::AttentionBlock;
use super::cache::FeatCache;
use super::conv::CausalConv3d;
use super::resample::Resample;
use super::residual::{ResidualBlock, RmsNorm};
use super::residual_blocks::{ResidualDownBlock, ResidualUpBlock};
use crate::weights::Weights;

pub(super) enum Layer {
    Res(ResidualBlock),
    Attn(AttentionBlock),
    Resample(Resample),
    /// A Wan 2.2 encoder level.
    ResDown(ResidualDownBlock),
    /// A Wan 2.2 decoder level.
    ResUp(ResidualUpBlock),
}

impl Layer {
    fn forward(&self, x: &Tensor, cache: &mut FeatCache, first_chunk: bool) -> Tensor {
        match self {
            Layer::Res(r) => r.forward(x, cache),
            Layer::Attn(a) => a.forward(x),
            Layer::Resample(r) => r.forward(x, cache),
            Layer::ResDown(r) => r.forward(x, cache),
            Layer::ResUp(r) => r.forward(x, cache, first_chunk),
        }
    }
}

fn run(layers: &[Layer], mut x: Tensor, cache: &mut FeatCache, first_chunk: bool) -> Tensor {
    for l in layers {
        x = l.forward(&x, cache, first_chunk);
    }
    x
}

/// resnet, attention, resnet.
pub(super) fn mid_block(w: &Weights, dim: i64) -> Result<Vec<Layer>> {
    Ok(vec![
        Layer::Res(ResidualBlock::new(&w.pp("resnets.0"), dim, dim)?),
        Layer::Attn(AttentionBlock::new(&w.pp("attentions.0"), dim)?),
        Layer::Res(ResidualBlock::new(&w.pp("resnets.1"), dim, dim)?),
    ])
}

pub(super) struct Coder {
    pub(super) conv_in: CausalConv3d,
    pub(super) body: Vec<Layer>,
    pub(super) norm_out: RmsNorm,
    pub(super) conv_out: CausalConv3d,
}

impl Coder {
    /// One chunk through the stack; `first_chunk` (the decoder's first latent frame) reaches
    /// the Wan 2.2 up blocks' shortcuts.
    pub(super) fn forward(&self, x: &Tensor, cache: &mut FeatCache, first_chunk: bool) -> Tensor {
        cache.rewind();
        let x = self.conv_in.cached(x, cache);
        let x = run(&self.body, x, cache, first_chunk);
        self.conv_out.cached(&self.norm_out.forward(&x).silu(), cache)
    }
}
