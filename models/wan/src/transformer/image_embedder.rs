//! `condition_embedder.image_embedder` (diffusers `WanImageEmbedding`): CLIP hidden states →
//! the image tokens cross-attention reads. LayerNorm, a GELU feed-forward, LayerNorm; both norms
//! run in float32 whatever the model's dtype (diffusers' `FP32LayerNorm`). First-and-last-frame
//! models add a learned position table over the two images' tokens.

use anyhow::{ensure, Result};
use fastvideo_layers::{Linear, Lora};
use tch::{Kind, Tensor};

use crate::weights::Weights;

pub(super) struct ImageEmbedder {
    norm1: (Tensor, Tensor),
    ff_in: Linear,
    ff_out: Linear,
    norm2: (Tensor, Tensor),
    /// `[1, pos_embed_seq_len, image_dim]` (FLF2V).
    pos_embed: Option<Tensor>,
    kind: Kind,
}

/// nn.LayerNorm's default; `WanImageEmbedding` does not set one.
const EPS: f64 = 1e-5;

impl ImageEmbedder {
    pub(super) fn new(w: &Weights, image_dim: i64, dim: i64, pos_embed_seq_len: Option<i64>) -> Result<Self> {
        let fp32 = w.with_kind(Kind::Float);
        let norm = |name: &str, d: i64| -> Result<(Tensor, Tensor)> {
            Ok((fp32.get(&format!("{name}.weight"), &[d])?, fp32.get(&format!("{name}.bias"), &[d])?))
        };
        Ok(Self {
            norm1: norm("norm1", image_dim)?,
            ff_in: Linear::new(&w.pp("ff.net.0.proj"), image_dim, image_dim, true)?,
            ff_out: Linear::new(&w.pp("ff.net.2"), image_dim, dim, true)?,
            norm2: norm("norm2", dim)?,
            pos_embed: pos_embed_seq_len.map(|n| w.get("pos_embed", &[1, n, image_dim])).transpose()?,
            kind: w.kind(),
        })
    }

    pub(super) fn linears<'a>(&'a self, out: &mut Vec<&'a Linear>) {
        out.extend([&self.ff_in, &self.ff_out]);
    }

    /// `image [N, T, image_dim]` → `[B, T', dim]`: B = N, or N / 2 for a first-and-last-frame
    /// model, whose two images per sample (first, last) become one sequence of 2T tokens.
    pub(super) fn forward(&self, image: &Tensor, lora: Lora) -> Result<Tensor> {
        let (n, t, d) = image.size3()?;
        let x = image.to_kind(self.kind);
        let x = match &self.pos_embed {
            Some(pos) => {
                ensure!(
                    n % 2 == 0 && 2 * t == pos.size()[1],
                    "transformer: a first-and-last-frame model takes image embeddings [2B, {}, {d}] (first and \
                     last frame per sample), got {:?}",
                    pos.size()[1] / 2,
                    image.size()
                );
                x.view([n / 2, 2 * t, d]) + pos
            }
            None => x,
        };
        let x = layer_norm_fp32(&x, &self.norm1);
        let x = self.ff_out.forward_lora(&self.ff_in.forward_lora(&x, lora).gelu("none"), lora);
        Ok(layer_norm_fp32(&x, &self.norm2))
    }
}

/// LayerNorm computed in float32, returned in the input's dtype.
fn layer_norm_fp32(x: &Tensor, (w, b): &(Tensor, Tensor)) -> Tensor {
    x.to_kind(Kind::Float).layer_norm([w.size()[0]], Some(w), Some(b), EPS, false).to_kind(x.kind())
}
