//! `Flux2TransformerBlock`: the double-stream block. Image and text keep their own weights
//! (projections, norms, feed-forwards, modulations) and meet in one attention over
//! `[text | image]`.

use anyhow::Result;
use fastvideo_layers::{Linear, Lora};
use fastvideo_torch::weights::Weights;
use tch::Tensor;

use crate::config::TransformerConfig;
use crate::embed::Mod;
use crate::feed_forward::FeedForward;
use crate::packed::Layout;
use fastvideo_layers::joint::{attend, linear, norm_rope, HeadNorm, PackedLora, RopeTables, Stream as Part};

/// One stream's half of the block.
struct Stream {
    qkv: Linear,
    norm_q: HeadNorm,
    norm_k: HeadNorm,
    out: Linear,
    ff: FeedForward,
}

/// One double-stream block.
pub struct DoubleBlock {
    image: Stream,
    text: Stream,
    heads: i64,
    head_dim: i64,
    eps: f64,
}

impl DoubleBlock {
    /// The block at `w` (`transformer_blocks.N`).
    pub fn new(w: &Weights, c: &TransformerConfig) -> Result<Self> {
        let (dim, d, eps) = (c.inner_dim(), c.attention_head_dim, c.eps);
        let a = w.pp("attn");
        let proj = |name: &str| Linear::new(&a.pp(name), dim, dim, false);
        let image = Stream {
            qkv: Linear::concat(vec![proj("to_q")?, proj("to_k")?, proj("to_v")?]),
            norm_q: HeadNorm::new(&a.pp("norm_q"), d, eps)?,
            norm_k: HeadNorm::new(&a.pp("norm_k"), d, eps)?,
            out: proj("to_out.0")?,
            ff: FeedForward::new(&w.pp("ff"), dim, c.mlp_hidden())?,
        };
        let text = Stream {
            qkv: Linear::concat(vec![proj("add_q_proj")?, proj("add_k_proj")?, proj("add_v_proj")?]),
            norm_q: HeadNorm::new(&a.pp("norm_added_q"), d, eps)?,
            norm_k: HeadNorm::new(&a.pp("norm_added_k"), d, eps)?,
            out: proj("to_add_out")?,
            ff: FeedForward::new(&w.pp("ff_context"), dim, c.mlp_hidden())?,
        };
        Ok(Self { image, text, heads: c.num_attention_heads, head_dim: d, eps })
    }

    /// q, k (normed and rotated as the stream's tokens) and v `[1, S, H, D]` of `x`.
    fn qkv(&self, s: &Stream, x: &Tensor, rope: &RopeTables, stream: Part, lora: Lora) -> (Tensor, Tensor, Tensor) {
        let (b, l, _) = x.size3().expect("[B, L, C]");
        let parts = linear(&s.qkv, x, lora).view([b, l, 3, self.heads, self.head_dim]);
        let (q, k) = norm_rope(&parts.select(2, 0), &parts.select(2, 1), (&s.norm_q, &s.norm_k), rope, stream);
        (q, k, parts.select(2, 2))
    }

    /// `(image [1, ΣSi, C], text [1, ΣSt, C])` (a pack's streams, see [`Layout`]) through the
    /// block with per-token (or broadcast) image and text modulations (two triples each) and
    /// the pack's rotary tables; each sample's tokens with its adapters (`lora`).
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        image: &Tensor,
        text: &Tensor,
        image_mod: &[Mod],
        text_mod: &[Mod],
        rope: &RopeTables,
        layout: &Layout,
        lora: Option<&PackedLora>,
    ) -> (Tensor, Tensor) {
        let (ri, rt) = (lora.map(|l| &l.image), lora.map(|l| &l.text));
        let (qi, ki, vi) = self.qkv(&self.image, &image_mod[0].modulate(image, self.eps), rope, Part::Image, ri);
        let (qt, kt, vt) = self.qkv(&self.text, &text_mod[0].modulate(text, self.eps), rope, Part::Text, rt);
        let joint = |t: Tensor, i: Tensor| layout.interleave(&t, &i);
        let o = attend(&joint(qt, qi), &joint(kt, ki), &joint(vt, vi), &layout.spans());
        let (ot, oi) = layout.split(&o);
        let run = |s: &Stream, x: &Tensor, attn: &Tensor, m: &[Mod], rows: Lora| {
            let (x, normed) = m[0].gated_then(x, &linear(&s.out, attn, rows), &m[1], self.eps);
            m[1].gated(&x, &s.ff.forward(&normed, rows))
        };
        (run(&self.image, image, &oi, image_mod, ri), run(&self.text, text, &ot, text_mod, rt))
    }

    /// Its linears.
    pub fn linears<'a>(&'a self, out: &mut Vec<&'a Linear>) {
        for s in [&self.image, &self.text] {
            out.extend([&s.qkv, &s.out]);
            s.ff.linears(out);
        }
    }
}
