//! Grouped-query self-attention: q, k, v projections (with biases in Qwen2.5), Qwen3's RMSNorm
//! of q and k per head before the rotary embedding, the key/value heads shared by groups of query
//! heads, causal SDPA scaled by `1/sqrt(head_dim)`.
//!
//! A decode step is bound by launches, not arithmetic, so q, k and v are one matmul, q and k are
//! normalised and rotated together, and the output projection adds into the residual stream.

use anyhow::Result;
use fastvideo_layers::Linear;
use fastvideo_pipeline::token::{KvStore, PagedBatch};
use fastvideo_torch::weights::Weights;
use tch::{Kind, Tensor};

use crate::config::{Family, QwenConfig};
use crate::rms_norm::RmsNorm;
use crate::rope::Rope;

/// One layer's grouped-query self-attention, its projections fused for decode.
pub struct Attention {
    /// q, k and v as one matmul, outputs in that order.
    qkv_proj: Linear,
    o_proj: Linear,
    /// Qwen3's per-head norms of q and k as one over their heads together (q's then k's).
    qk_norm: Option<RmsNorm>,
    heads: i64,
    kv_heads: i64,
    head_dim: i64,
}

impl Attention {
    /// Reads a layer's `q_proj`, `k_proj`, `v_proj`, `o_proj` (and Qwen3's `q_norm`, `k_norm`)
    /// under `w`.
    pub fn new(w: &Weights, c: &QwenConfig) -> Result<Self> {
        let (h, d) = (c.hidden_size, c.head_dim);
        let (heads, kv_heads) = (c.num_attention_heads, c.num_key_value_heads);
        let proj = |name: &str, heads: i64| Linear::new(&w.pp(name), h, heads * d, c.qkv_bias);
        let qk_norm = match c.family {
            Family::Qwen3 => {
                let norm = |name: &str| RmsNorm::new(&w.pp(name), d, c.rms_norm_eps);
                Some(RmsNorm::over_heads(&[(norm("q_norm")?, heads), (norm("k_norm")?, kv_heads)]))
            }
            Family::Qwen2 => None,
        };
        Ok(Self {
            qkv_proj: Linear::concat(vec![
                proj("q_proj", heads)?,
                proj("k_proj", kv_heads)?,
                proj("v_proj", kv_heads)?,
            ]),
            o_proj: Linear::new(&w.pp("o_proj"), heads * d, h, false)?,
            qk_norm,
            heads,
            kv_heads,
            head_dim: d,
        })
    }

    /// From a fused q/k/v linear and an output linear another model holds (shared), with
    /// Qwen3's per-head norms of q and k.
    pub(crate) fn from_parts(qkv_proj: Linear, o_proj: Linear, qk_norm: RmsNorm, c: &QwenConfig) -> Self {
        Self {
            qkv_proj,
            o_proj,
            qk_norm: Some(qk_norm),
            heads: c.num_attention_heads,
            kv_heads: c.num_key_value_heads,
            head_dim: c.head_dim,
        }
    }

    /// q, k, v `[B, heads, T, D]` of `x [B, T, C]`: projected, q and k normalised per head
    /// (Qwen3) and rotated by `rope` (tables `[T, D]`, or `[B, 1, T, D]` per row). Views into
    /// the projection's and the rotation's outputs.
    fn project(&self, x: &Tensor, rope: (&Tensor, &Tensor)) -> (Tensor, Tensor, Tensor) {
        let (b, t, _) = x.size3().expect("[B, T, C]");
        let (hq, hk) = (self.heads, self.kv_heads);
        let qkv = self.qkv_proj.forward(x).view([b, t, hq + 2 * hk, self.head_dim]);
        let qk = qkv.narrow(2, 0, hq + hk);
        let qk = match &self.qk_norm {
            Some(norm) => norm.forward(&qk),
            None => qk,
        };
        let qk = Rope::apply(&qk.transpose(1, 2), rope.0, rope.1);
        (qk.narrow(1, 0, hq), qk.narrow(1, hq, hk), qkv.narrow(2, hq + hk, hk).transpose(1, 2))
    }

    /// The output projection of `o [B, heads, T, D]`, added into `residual [B, T, C]` in place.
    fn output(&self, o: &Tensor, residual: &Tensor) {
        let (b, _, t, _) = o.size4().expect("[B, heads, T, D]");
        self.o_proj.forward_add(residual, &o.transpose(1, 2).reshape([b, t, self.heads * self.head_dim]));
    }

    /// `x [B, T, C]` at positions `cache.len()..+T` of layer `layer`, its output added into
    /// `residual`; appends its keys and values.
    pub fn forward(
        &self,
        x: &Tensor,
        residual: &Tensor,
        rope: (&Tensor, &Tensor),
        cache: &mut dyn KvStore,
        layer: usize,
    ) -> Result<()> {
        let t = x.size()[1];
        let (q, k, v) = self.project(x, rope);
        let past = cache.len();
        // A first append may keep what it gets: its own copies, not views holding the projection.
        let (k, v) = if past == 0 { (k.contiguous(), v.contiguous()) } else { (k, v) };
        let (k, v) = cache.append(layer, &k, &v)?;
        let groups = self.heads / self.kv_heads;
        let (k, v) = if groups > 1 {
            (k.repeat_interleave_self_int(groups, 1, None), v.repeat_interleave_self_int(groups, 1, None))
        } else {
            (k, v)
        };
        let o = match (past, t) {
            // The whole sequence at once, or one new token that sees everything before it.
            (0, _) => Tensor::scaled_dot_product_attention(&q, &k, &v, None::<Tensor>, 0.0, t > 1, None, false),
            (_, 1) => Tensor::scaled_dot_product_attention(&q, &k, &v, None::<Tensor>, 0.0, false, None, false),
            // A chunk after earlier positions: query i sees keys up to past + i.
            _ => {
                let s = past + t;
                let qi = Tensor::arange(t, (Kind::Int64, x.device())).unsqueeze(1) + past;
                let kj = Tensor::arange(s, (Kind::Int64, x.device())).unsqueeze(0);
                let mask = kj.le_tensor(&qi);
                Tensor::scaled_dot_product_attention(&q, &k, &v, Some(mask), 0.0, false, None, false)
            }
        };
        self.output(&o, residual);
        Ok(())
    }

    /// One new token of each of `B` requests whose caches share one block pool, `x [B, 1, C]`,
    /// its output added into `residual`: the keys and values written into the pages and
    /// attention over all rows' pages at once.
    pub fn forward_paged(
        &self,
        x: &Tensor,
        residual: &Tensor,
        rope: (&Tensor, &Tensor),
        batch: &PagedBatch,
        layer: usize,
    ) {
        let (q, k, v) = self.project(x, rope);
        batch.write(layer, &k, &v);
        let (pk, pv) = batch.pool().layer(layer);
        let (table, lens) = batch.tables();
        let q = q.contiguous();
        let o = match fastvideo_kernels::paged_decode::attention(&q, pk, pv, table, lens) {
            Some(o) => o.unsqueeze(2),
            None => batch.attend_gathered(layer, &q),
        };
        self.output(&o, residual);
    }

    /// `x [B, T, C]` from position 0 with no cache, each query seeing the keys `mask
    /// [B, 1, T, T]` (bool) allows: an encoder's pass over padded prompts. Its output is added
    /// into `residual`.
    pub fn forward_masked(&self, x: &Tensor, residual: &Tensor, rope: (&Tensor, &Tensor), mask: &Tensor) {
        let (q, k, v) = self.project(x, rope);
        let groups = self.heads / self.kv_heads;
        let (k, v) = match groups > 1 {
            true => (k.repeat_interleave_self_int(groups, 1, None), v.repeat_interleave_self_int(groups, 1, None)),
            false => (k, v),
        };
        let o = Tensor::scaled_dot_product_attention(&q, &k, &v, Some(mask), 0.0, false, None, false);
        self.output(&o, residual);
    }

    /// One new token of each of `B` requests, `x [B, 1, C]`, each at its own position (`rope`
    /// tables `[B, 1, 1, D]`) with its own cache, its output added into `residual`: the
    /// projections run batched, the attention row by row over each row's keys.
    pub fn forward_rows(
        &self,
        x: &Tensor,
        residual: &Tensor,
        rope: (&Tensor, &Tensor),
        caches: &mut [&mut dyn KvStore],
        layer: usize,
    ) -> Result<()> {
        let (q, k, v) = self.project(x, rope);
        let groups = self.heads / self.kv_heads;
        let rows = caches
            .iter_mut()
            .enumerate()
            .map(|(r, cache)| {
                let r = r as i64;
                let (kr, vr) = cache.append(layer, &k.narrow(0, r, 1), &v.narrow(0, r, 1))?;
                let (kr, vr) = if groups > 1 {
                    (kr.repeat_interleave_self_int(groups, 1, None), vr.repeat_interleave_self_int(groups, 1, None))
                } else {
                    (kr, vr)
                };
                Ok(Tensor::scaled_dot_product_attention(
                    &q.narrow(0, r, 1),
                    &kr,
                    &vr,
                    None::<Tensor>,
                    0.0,
                    false,
                    None,
                    false,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        self.output(&Tensor::cat(&rows, 0), residual);
        Ok(())
    }
}
