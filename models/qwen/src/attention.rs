//! Grouped-query self-attention: q, k, v projections (with biases in Qwen2.5), Qwen3's RMSNorm
//! of q and k per head before the rotary embedding, the key/value heads shared by groups of query
//! heads, causal SDPA scaled by `1/sqrt(head_dim)`.

use anyhow::Result;
use fastvideo_pipeline::token::{KvStore, PagedBatch};
use fastvideo_torch::weights::Weights;
use tch::{Kind, Tensor};

use crate::config::{Family, QwenConfig};
use crate::rms_norm::RmsNorm;
use crate::rope::Rope;

/// `x Wᵀ + b`.
pub struct Linear {
    weight: Tensor,
    bias: Option<Tensor>,
}

impl Linear {
    pub fn new(w: &Weights, in_dim: i64, out_dim: i64, bias: bool) -> Result<Self> {
        let weight = w.get("weight", &[out_dim, in_dim])?;
        let bias = if bias { Some(w.get("bias", &[out_dim])?) } else { None };
        Ok(Self { weight, bias })
    }

    pub fn forward(&self, x: &Tensor) -> Tensor {
        x.linear(&self.weight, self.bias.as_ref())
    }
}

pub struct Attention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    q_norm: Option<RmsNorm>,
    k_norm: Option<RmsNorm>,
    heads: i64,
    kv_heads: i64,
    head_dim: i64,
}

impl Attention {
    pub fn new(w: &Weights, c: &QwenConfig) -> Result<Self> {
        let (h, d) = (c.hidden_size, c.head_dim);
        let norm = |name: &str| -> Result<Option<RmsNorm>> {
            match c.family {
                Family::Qwen3 => Ok(Some(RmsNorm::new(&w.pp(name), d, c.rms_norm_eps)?)),
                Family::Qwen2 => Ok(None),
            }
        };
        Ok(Self {
            q_proj: Linear::new(&w.pp("q_proj"), h, c.num_attention_heads * d, c.qkv_bias)?,
            k_proj: Linear::new(&w.pp("k_proj"), h, c.num_key_value_heads * d, c.qkv_bias)?,
            v_proj: Linear::new(&w.pp("v_proj"), h, c.num_key_value_heads * d, c.qkv_bias)?,
            o_proj: Linear::new(&w.pp("o_proj"), c.num_attention_heads * d, h, false)?,
            q_norm: norm("q_norm")?,
            k_norm: norm("k_norm")?,
            heads: c.num_attention_heads,
            kv_heads: c.num_key_value_heads,
            head_dim: d,
        })
    }

    /// q, k, v `[B, heads, T, D]` of `x [B, T, C]`: projected, q and k normalised per head
    /// (Qwen3) and rotated by `rope` (tables `[T, D]`, or `[B, 1, T, D]` per row).
    fn project(&self, x: &Tensor, rope: (&Tensor, &Tensor)) -> (Tensor, Tensor, Tensor) {
        let (b, t, _) = x.size3().expect("[B, T, C]");
        let heads = |y: Tensor, n: i64, norm: &Option<RmsNorm>| {
            let y = y.view([b, t, n, self.head_dim]);
            let y = match norm {
                Some(nm) => nm.forward(&y),
                None => y,
            };
            y.transpose(1, 2)
        };
        let q = heads(self.q_proj.forward(x), self.heads, &self.q_norm);
        let k = heads(self.k_proj.forward(x), self.kv_heads, &self.k_norm);
        let v = heads(self.v_proj.forward(x), self.kv_heads, &None);
        (Rope::apply(&q, rope.0, rope.1), Rope::apply(&k, rope.0, rope.1), v)
    }

    /// `x [B, T, C]` at positions `cache.len()..+T` of layer `layer`; appends its keys and values.
    pub fn forward(
        &self,
        x: &Tensor,
        rope: (&Tensor, &Tensor),
        cache: &mut dyn KvStore,
        layer: usize,
    ) -> Result<Tensor> {
        let (b, t, _) = x.size3().expect("[B, T, C]");
        let (q, k, v) = self.project(x, rope);
        let past = cache.len();
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
        Ok(self.o_proj.forward(&o.transpose(1, 2).reshape([b, t, self.heads * self.head_dim])))
    }

    /// One new token of each of `B` requests whose caches share one block pool, `x [B, 1, C]`:
    /// the keys and values written into the pages and attention over all rows' pages at once.
    pub fn forward_paged(&self, x: &Tensor, rope: (&Tensor, &Tensor), batch: &PagedBatch, layer: usize) -> Tensor {
        let b = x.size()[0];
        let (q, k, v) = self.project(x, rope);
        batch.write(layer, &k, &v);
        let (pk, pv) = batch.pool().layer(layer);
        let (table, lens) = batch.tables();
        let q = q.contiguous();
        let o = match fastvideo_kernels::paged_decode::attention(&q, pk, pv, table, lens) {
            Some(o) => o.unsqueeze(2),
            None => batch.attend_gathered(layer, &q),
        };
        self.o_proj.forward(&o.transpose(1, 2).reshape([b, 1, self.heads * self.head_dim]))
    }

    /// One new token of each of `B` requests, `x [B, 1, C]`, each at its own position (`rope`
    /// tables `[B, 1, 1, D]`) with its own cache: the projections run batched, the attention
    /// row by row over each row's keys.
    pub fn forward_rows(
        &self,
        x: &Tensor,
        rope: (&Tensor, &Tensor),
        caches: &mut [&mut dyn KvStore],
        layer: usize,
    ) -> Result<Tensor> {
        let b = x.size()[0];
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
        let o = Tensor::cat(&rows, 0);
        Ok(self.o_proj.forward(&o.transpose(1, 2).reshape([b, 1, self.heads * self.head_dim])))
    }
}
