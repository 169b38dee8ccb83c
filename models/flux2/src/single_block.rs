//! `Flux2SingleTransformerBlock`: the parallel block on the joint sequence. One projection
//! gives the queries, keys, values and the feed-forward's input; one projection takes the
//! attention output and the feed-forward's activation back together.

use anyhow::Result;
use fastvideo_layers::joint::linear;
use fastvideo_layers::{Linear, Lora};
use fastvideo_torch::weights::Weights;
use tch::Tensor;

use crate::config::TransformerConfig;
use crate::embed::Mod;
use crate::feed_forward::swiglu;
use fastvideo_layers::joint::{attend, norm_rope, HeadNorm, RopeTables, Stream};

/// One single-stream block.
pub struct SingleBlock {
    qkv_mlp: Linear,
    norm_q: HeadNorm,
    norm_k: HeadNorm,
    out: Linear,
    heads: i64,
    head_dim: i64,
    mlp_hidden: i64,
    eps: f64,
}

impl SingleBlock {
    /// The block at `w` (`single_transformer_blocks.N`).
    pub fn new(w: &Weights, c: &TransformerConfig) -> Result<Self> {
        let (dim, d, hidden) = (c.inner_dim(), c.attention_head_dim, c.mlp_hidden());
        let a = w.pp("attn");
        Ok(Self {
            qkv_mlp: Linear::new(&a.pp("to_qkv_mlp_proj"), dim, 3 * dim + 2 * hidden, false)?,
            norm_q: HeadNorm::new(&a.pp("norm_q"), d, c.eps)?,
            norm_k: HeadNorm::new(&a.pp("norm_k"), d, c.eps)?,
            out: Linear::new(&a.pp("to_out"), dim + hidden, dim, false)?,
            heads: c.num_attention_heads,
            head_dim: d,
            mlp_hidden: hidden,
            eps: c.eps,
        })
    }

    /// `x [1, S, C]` (a pack's joint sequence) through the block with its one modulation
    /// triple (per token or broadcast), attending within each sample's span; the tokens' rows
    /// with their adapters (`lora`).
    pub fn forward(&self, x: &Tensor, m: &Mod, rope: &RopeTables, spans: &[(i64, i64)], lora: Lora) -> Tensor {
        let (b, s, _) = x.size3().expect("[B, S, C]");
        let inner = self.heads * self.head_dim;
        let h = linear(&self.qkv_mlp, &m.modulate(x, self.eps), lora);
        let qkv = h.narrow(2, 0, 3 * inner).view([b, s, 3, self.heads, self.head_dim]);
        let mlp = swiglu(&h.narrow(2, 3 * inner, 2 * self.mlp_hidden).contiguous());
        let (q, k) = norm_rope(&qkv.select(2, 0), &qkv.select(2, 1), (&self.norm_q, &self.norm_k), rope, Stream::Joint);
        let o = attend(&q, &k, &qkv.select(2, 2), spans);
        m.gated(x, &linear(&self.out, &Tensor::cat(&[o, mlp], 2), lora))
    }

    /// Its linears.
    pub fn linears<'a>(&'a self, out: &mut Vec<&'a Linear>) {
        out.extend([&self.qkv_mlp, &self.out]);
    }
}
