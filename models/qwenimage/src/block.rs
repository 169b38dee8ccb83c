//! `QwenImageTransformerBlock`: the MMDiT block. Image and text keep their own weights
//! (modulations from the time embedding, projections with biases, per-head RMS norms, GELU
//! feed-forwards) and meet in one attention over `[text | image]`.

use anyhow::Result;
use fastvideo_layers::joint::{
    attend, linear, norm_rope, with_rows, HeadNorm, Layout, Mod, PackedLora, RopeTables, Stream as Part,
};
use fastvideo_layers::{Linear, Lora};
use fastvideo_torch::weights::Weights;
use tch::Tensor;

use crate::config::TransformerConfig;

const EPS: f64 = 1e-6;

/// `FeedForward(dim, activation_fn="gelu-approximate")`: `net.0.proj`, tanh GELU, `net.2`.
struct FeedForward {
    proj: Linear,
    out: Linear,
}

impl FeedForward {
    fn new(w: &Weights, dim: i64) -> Result<Self> {
        Ok(Self {
            proj: Linear::new(&w.pp("net.0.proj"), dim, 4 * dim, true)?,
            out: Linear::new(&w.pp("net.2"), 4 * dim, dim, true)?,
        })
    }

    fn forward(&self, x: &Tensor, lora: Lora) -> Tensor {
        let h = with_rows(x, lora, |x, r| self.proj.forward_gelu_tanh_lora(x, r));
        linear(&self.out, &h, lora)
    }
}

/// One stream's half of the block.
struct Stream {
    modulation: Linear,
    qkv: Linear,
    norm_q: HeadNorm,
    norm_k: HeadNorm,
    out: Linear,
    mlp: FeedForward,
}

/// One block.
pub struct Block {
    image: Stream,
    text: Stream,
    heads: i64,
    head_dim: i64,
}

impl Block {
    /// The block at `w` (`transformer_blocks.N`).
    pub fn new(w: &Weights, c: &TransformerConfig) -> Result<Self> {
        let (dim, d) = (c.inner_dim(), c.attention_head_dim);
        let a = w.pp("attn");
        let proj = |name: &str| Linear::new(&a.pp(name), dim, dim, true);
        let image = Stream {
            modulation: Linear::new(&w.pp("img_mod.1"), dim, 6 * dim, true)?,
            qkv: Linear::concat(vec![proj("to_q")?, proj("to_k")?, proj("to_v")?]),
            norm_q: HeadNorm::new(&a.pp("norm_q"), d, EPS)?,
            norm_k: HeadNorm::new(&a.pp("norm_k"), d, EPS)?,
            out: proj("to_out.0")?,
            mlp: FeedForward::new(&w.pp("img_mlp"), dim)?,
        };
        let text = Stream {
            modulation: Linear::new(&w.pp("txt_mod.1"), dim, 6 * dim, true)?,
            qkv: Linear::concat(vec![proj("add_q_proj")?, proj("add_k_proj")?, proj("add_v_proj")?]),
            norm_q: HeadNorm::new(&a.pp("norm_added_q"), d, EPS)?,
            norm_k: HeadNorm::new(&a.pp("norm_added_k"), d, EPS)?,
            out: proj("to_add_out")?,
            mlp: FeedForward::new(&w.pp("txt_mlp"), dim)?,
        };
        Ok(Self { image, text, heads: c.num_attention_heads, head_dim: d })
    }

    /// q, k (normed and rotated as the stream's tokens) and v `[1, S, H, D]` of `x`.
    fn qkv(&self, s: &Stream, x: &Tensor, rope: &RopeTables, part: Part, lora: Lora) -> (Tensor, Tensor, Tensor) {
        let (b, l, _) = x.size3().expect("[B, L, C]");
        let parts = linear(&s.qkv, x, lora).view([b, l, 3, self.heads, self.head_dim]);
        let (q, k) = norm_rope(&parts.select(2, 0), &parts.select(2, 1), (&s.norm_q, &s.norm_k), rope, part);
        (q, k, parts.select(2, 2))
    }

    /// `(image [1, ΣSi, C], text [1, ΣSt, C])` of a pack through the block, modulated by the
    /// per-sample time embedding `temb [B, C]`. With `zero_cond` (Edit-2511's `zero_cond_t`),
    /// `(temb at time 0 [B, C], each image token's row [ΣSi])`: rows `0..B` are the samples'
    /// embeddings, `B..2B` their time-0 ones (reference tokens). Each sample's rows run with
    /// its adapters (`lora`).
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        image: &Tensor,
        text: &Tensor,
        temb: &Tensor,
        zero_cond: Option<(&Tensor, &Tensor)>,
        rope: &RopeTables,
        layout: &Layout,
        lora: Option<&PackedLora>,
    ) -> (Tensor, Tensor) {
        let (rs, ri, rt) = (lora.map(|l| &l.samples), lora.map(|l| &l.image), lora.map(|l| &l.text));
        let mods = |s: &Stream, lengths: &[i64]| {
            layout.spread_mods(&Mod::split(&linear(&s.modulation, &temb.silu(), rs), 2), lengths)
        };
        let mi = match zero_cond {
            None => mods(&self.image, &layout.image),
            Some((temb0, rows)) => {
                let both = Tensor::cat(&[temb, temb0], 0);
                let per_token = |t: &Tensor| t.squeeze_dim(1).index_select(0, rows).unsqueeze(0);
                let stacked = lora.map(|l| l.samples_stacked(layout.len() as i64, 2));
                Mod::split(&linear(&self.image.modulation, &both.silu(), stacked.as_ref()), 2)
                    .iter()
                    .map(|m| Mod { shift: per_token(&m.shift), scale: per_token(&m.scale), gate: per_token(&m.gate) })
                    .collect()
            }
        };
        let mt = mods(&self.text, &layout.text);
        let (qi, ki, vi) = self.qkv(&self.image, &mi[0].modulate(image, EPS), rope, Part::Image, ri);
        let (qt, kt, vt) = self.qkv(&self.text, &mt[0].modulate(text, EPS), rope, Part::Text, rt);
        let joint = |t: Tensor, i: Tensor| layout.interleave(&t, &i);
        let o = attend(&joint(qt, qi), &joint(kt, ki), &joint(vt, vi), &layout.spans());
        let (ot, oi) = layout.split(&o);
        let run = |s: &Stream, x: &Tensor, attn: &Tensor, m: &[Mod], rows: Lora| {
            let (x, normed) = m[0].gated_then(x, &linear(&s.out, attn, rows), &m[1], EPS);
            m[1].gated(&x, &s.mlp.forward(&normed, rows))
        };
        (run(&self.image, image, &oi, &mi, ri), run(&self.text, text, &ot, &mt, rt))
    }

    /// Its linears.
    pub fn linears<'a>(&'a self, out: &mut Vec<&'a Linear>) {
        for s in [&self.image, &self.text] {
            out.extend([&s.modulation, &s.qkv, &s.out, &s.mlp.proj, &s.mlp.out]);
        }
    }
}
