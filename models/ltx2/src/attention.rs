//! `LTX2Attention` with both of diffusers' processors: queries from one stream, keys and values
//! from the same or another (text, or the other modality), RMS-normalised across heads, rotary
//! positions that may differ for queries and keys (the audio-video attention), optional per-head
//! gates (LTX-2.3), and the perturbed variant spatio-temporal guidance runs (the values passed
//! through instead of attending, per sample).

use anyhow::Result;
use fastvideo_kernels::{rms_norm_rope, rms_norm_rope_split};
use fastvideo_layers::linear::Lora;
use fastvideo_layers::Linear;
use fastvideo_torch::weights::Weights;
use tch::{Kind, Tensor};

use crate::embed::RmsNorm;
use crate::rope::Rope;

/// One attention module.
pub struct Attention {
    to_q: Linear,
    to_k: Linear,
    to_v: Linear,
    to_out: Linear,
    norm_q: RmsNorm,
    norm_k: RmsNorm,
    /// Per-head gate logits from the query input (`apply_gated_attention`).
    to_gate_logits: Option<Linear>,
    heads: i64,
}

/// Shapes of an attention module.
pub struct AttentionShape {
    /// Width of the query stream (and of the output).
    pub query_dim: i64,
    /// Width of the key/value stream.
    pub kv_dim: i64,
    /// Heads.
    pub heads: i64,
    /// Channels per head.
    pub head_dim: i64,
    /// Biases on q, k, v.
    pub bias: bool,
    /// Bias on the output projection.
    pub out_bias: bool,
    /// Per-head gates.
    pub gated: bool,
}

/// Spatio-temporal guidance on one attention call: `mask [B, 1, 1]` is 1 where a sample attends
/// and 0 where it takes the values instead; `all` when every sample is perturbed (attention
/// then is skipped).
#[derive(Clone, Copy)]
pub struct Perturbation<'a> {
    /// Per sample: 1 attends, 0 passes the values through.
    pub mask: &'a Tensor,
    /// Every sample passes its values through.
    pub all: bool,
}

impl Attention {
    /// The module at `w`.
    pub fn new(w: &Weights, s: &AttentionShape) -> Result<Self> {
        let inner = s.heads * s.head_dim;
        Ok(Self {
            to_q: Linear::new(&w.pp("to_q"), s.query_dim, inner, s.bias)?,
            to_k: Linear::new(&w.pp("to_k"), s.kv_dim, inner, s.bias)?,
            to_v: Linear::new(&w.pp("to_v"), s.kv_dim, inner, s.bias)?,
            to_out: Linear::new(&w.pp("to_out.0"), inner, s.query_dim, s.out_bias)?,
            norm_q: RmsNorm::new(&w.pp("norm_q"), inner, 1e-6, true)?,
            norm_k: RmsNorm::new(&w.pp("norm_k"), inner, 1e-6, true)?,
            to_gate_logits: s
                .gated
                .then(|| Linear::new(&w.pp("to_gate_logits"), s.query_dim, s.heads, true))
                .transpose()?,
            heads: s.heads,
        })
    }

    /// Queries from `x [B, S, query_dim]`, keys and values from `context` (or `x`); `mask` an
    /// additive bias `[B, 1, L]` on the keys; `q_rope` rotates the queries and `k_rope` (or
    /// `q_rope`) the keys; `lora`'s deltas on every projection.
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        x: &Tensor,
        context: Option<&Tensor>,
        mask: Option<&Tensor>,
        q_rope: Option<&Rope>,
        k_rope: Option<&Rope>,
        perturb: Option<Perturbation>,
        lora: Lora,
    ) -> Tensor {
        let ctx = context.unwrap_or(x);
        let gates = self.to_gate_logits.as_ref().map(|g| g.forward_lora(x, lora));
        let v = self.to_v.forward_lora(ctx, lora);
        let mut out = match perturb {
            Some(p) if p.all => v,
            _ => {
                let q = self.to_q.forward_lora(x, lora);
                let k = self.to_k.forward_lora(ctx, lora);
                let (q, k) = self.norm_rotate(q, k, q_rope, k_rope);
                let heads = |t: &Tensor| {
                    let s = t.size();
                    t.view([s[0], s[1], self.heads, -1]).transpose(1, 2)
                };
                let mask = mask.map(|m| m.unsqueeze(1));
                let o = Tensor::scaled_dot_product_attention(
                    &heads(&q),
                    &heads(&k),
                    &heads(&v),
                    mask,
                    0.0,
                    false,
                    None,
                    false,
                );
                let o = o.transpose(1, 2).flatten(2, -1).to_kind(q.kind());
                match perturb {
                    Some(p) => v.lerp_tensor(&o, p.mask),
                    None => o,
                }
            }
        };
        if let Some(g) = gates {
            let s = out.size();
            let gate = g.sigmoid() * 2.0;
            out = (out.view([s[0], s[1], self.heads, -1]) * gate.unsqueeze(-1)).view([s[0], s[1], s[2]]);
        }
        self.to_out.forward_lora(&out, lora)
    }

    /// `norm_q`/`norm_k` across heads, then the rotary tables: fused per tensor (or for q and k
    /// in one launch when they share a table) where the tables have the split layout; the
    /// plain ops otherwise.
    fn norm_rotate(&self, q: Tensor, k: Tensor, q_rope: Option<&Rope>, k_rope: Option<&Rope>) -> (Tensor, Tensor) {
        let eps = self.norm_q.eps();
        let head_dim = q.size()[2] / self.heads;
        let one = |x: &Tensor, norm: &RmsNorm, rope: Option<&Rope>| match (norm.weight(), rope) {
            (Some(w), None) => rms_norm_rope(&[(x, w)], eps, head_dim, None).remove(0),
            (Some(w), Some(r)) if r.split_tables().is_some() => {
                let (cos, sin) = r.split_tables().expect("split tables");
                rms_norm_rope_split(&[(x, w)], eps, head_dim, cos, sin).remove(0)
            }
            (_, Some(r)) => r.apply(&norm.forward(x)),
            (None, None) => norm.forward(x),
        };
        match (q_rope, k_rope, self.norm_q.weight(), self.norm_k.weight()) {
            (Some(r), None, Some(wq), Some(wk)) if q.size() == k.size() && r.split_tables().is_some() => {
                let (cos, sin) = r.split_tables().expect("split tables");
                let mut out = rms_norm_rope_split(&[(&q, wq), (&k, wk)], eps, head_dim, cos, sin);
                let k = out.pop().expect("two outputs");
                (out.pop().expect("two outputs"), k)
            }
            _ => (one(&q, &self.norm_q, q_rope), one(&k, &self.norm_k, k_rope.or(q_rope))),
        }
    }

    /// Its linears.
    pub fn linears<'a>(&'a self, out: &mut Vec<&'a Linear>) {
        out.extend([&self.to_q, &self.to_k, &self.to_v, &self.to_out]);
        out.extend(self.to_gate_logits.as_ref());
    }
}

/// `mask [B, L]` (1 keeps a key, 0 drops it) as the additive bias `[B, 1, L]` in `kind`:
/// `(1 − mask) · −10000`, as the reference turns it.
pub fn key_bias(mask: &Tensor, kind: Kind) -> Tensor {
    ((mask.to_kind(kind).ones_like() - mask.to_kind(kind)) * -10000.0).unsqueeze(1)
}
