//! The joint attention of one mixture-of-transformers layer. Two pathways with their own
//! weights meet only here: the understanding (text) stream `to_q/to_k/to_v/to_out` attends
//! causally over the prompt alone; the generation stream `add_{q,k,v}_proj/to_add_out` attends,
//! without a mask, over the whole prompt and every generated token (GQA in both).
//!
//! Since the prompt never sees generated tokens, its keys and values do not change between
//! denoise steps: [`MotAttention::prefix`] computes them once per prompt ([`LayerKv`]) and
//! [`MotAttention::generation`] reads them every step. Branches (classifier-free guidance) have
//! prompts of different lengths but generation streams of one length: the generation stream's
//! projections run batched, and each branch attends over its own prompt's keys.

use anyhow::Result;
use fastvideo_layers::heads::{merge_heads, split_heads};
use fastvideo_layers::Linear;
use fastvideo_torch::weights::Weights;
use tch::Tensor;

use crate::config::{Activation, Cosmos3Config};
use crate::norm::RmsNorm;
use crate::rope::MRope;

/// One prompt's keys and values of one layer, as the generation queries read them:
/// `[1, kv_heads, L, D]`, rotated (Edge: the keys normalised by `k_norm_und_for_gen`).
pub struct LayerKv {
    /// Keys.
    pub k: Tensor,
    /// Values.
    pub v: Tensor,
}

/// The generation stream's rotary tables: `cos`, `sin±` `[B, 1, L, D]` in the compute dtype,
/// and, on CUDA, fp32 `[B·L, D/2]` ones for the fused per-head norm and rotation.
pub struct GenRope {
    /// `cos` in the compute dtype.
    pub cos: Tensor,
    /// `sin` with rotate-half's sign, in the compute dtype.
    pub sin: Tensor,
    /// fp32 `(cos, sin)` `[B·L, D/2]` for the fused kernel, where it can run.
    pub half: Option<(Tensor, Tensor)>,
}

/// Whether keys and values are repeated over their query groups before the attention instead
/// of SDPA's own grouped-query path (`FASTVIDEO_COSMOS3_GQA=repeat`: for measuring the two).
fn repeat_kv(device: tch::Device) -> bool {
    !device.is_cuda() || std::env::var("FASTVIDEO_COSMOS3_GQA").is_ok_and(|v| v == "repeat")
}

/// One layer's joint attention.
pub struct MotAttention {
    und_qkv: Linear,
    und_out: Linear,
    gen_qkv: Linear,
    gen_out: Linear,
    /// Text q/k norms (absent in Edge).
    norm_q: Option<RmsNorm>,
    norm_k: Option<RmsNorm>,
    /// Edge: a separate norm of the text keys the generation queries see.
    k_norm_und_for_gen: Option<RmsNorm>,
    norm_added_q: RmsNorm,
    norm_added_k: RmsNorm,
    heads: i64,
    kv_heads: i64,
}

impl MotAttention {
    /// Reads `self_attn.*` of one layer under `w`.
    pub fn new(w: &Weights, c: &Cosmos3Config, act: Activation) -> Result<Self> {
        let (h, d, bias) = (c.hidden_size, c.head_dim, c.attention_bias);
        let (hq, hk) = (c.num_attention_heads, c.num_key_value_heads);
        let lin = |name: &str, out: i64| Linear::new(&w.pp(name), h, out, bias);
        let norm = |name: &str| RmsNorm::new(&w.pp(name), d, c.rms_norm_eps, act);
        let (norm_q, norm_k) =
            if c.qk_norm_for_text { (Some(norm("norm_q")?), Some(norm("norm_k")?)) } else { (None, None) };
        let k_norm_und_for_gen =
            if c.use_und_k_norm_for_gen && !c.qk_norm_for_text { Some(norm("k_norm_und_for_gen")?) } else { None };
        Ok(Self {
            und_qkv: Linear::concat(vec![lin("to_q", hq * d)?, lin("to_k", hk * d)?, lin("to_v", hk * d)?]),
            und_out: Linear::new(&w.pp("to_out"), hq * d, h, bias)?,
            gen_qkv: Linear::concat(vec![
                lin("add_q_proj", hq * d)?,
                lin("add_k_proj", hk * d)?,
                lin("add_v_proj", hk * d)?,
            ]),
            gen_out: Linear::new(&w.pp("to_add_out"), hq * d, h, bias)?,
            norm_q,
            norm_k,
            k_norm_und_for_gen,
            norm_added_q: norm("norm_added_q")?,
            norm_added_k: norm("norm_added_k")?,
            heads: hq,
            kv_heads: hk,
        })
    }

    /// The text pathway's linears and q/k norm weights, shared (none without text q/k norms).
    pub fn text_shared(&self) -> Option<(Linear, Linear, Tensor, Tensor)> {
        let (q, k) = (self.norm_q.as_ref()?, self.norm_k.as_ref()?);
        Some((self.und_qkv.share(), self.und_out.share(), q.weight(), k.weight()))
    }

    /// Bytes of its weights: `(text pathway, generation pathway)`.
    pub fn bytes(&self) -> (u64, u64) {
        let norms = |n: &[&Option<RmsNorm>]| n.iter().filter_map(|n| n.as_ref()).map(RmsNorm::bytes).sum::<u64>();
        (
            self.und_qkv.bytes() + self.und_out.bytes() + norms(&[&self.norm_q, &self.norm_k]),
            self.gen_qkv.bytes()
                + self.gen_out.bytes()
                + self.norm_added_q.bytes()
                + self.norm_added_k.bytes()
                + norms(&[&self.k_norm_und_for_gen]),
        )
    }

    /// q, k, v `[B, heads, L, D]` of `x [B, L, C]` through `qkv`.
    fn split(&self, qkv: &Linear, x: &Tensor) -> (Tensor, Tensor, Tensor) {
        let y = qkv.forward(x);
        let d = y.size()[2] / (self.heads + 2 * self.kv_heads);
        let (hq, hk) = (self.heads * d, self.kv_heads * d);
        (
            split_heads(&y.narrow(2, 0, hq), self.heads),
            split_heads(&y.narrow(2, hq, hk), self.kv_heads),
            split_heads(&y.narrow(2, hq + hk, hk), self.kv_heads),
        )
    }

    /// The generation stream's q, k (normalised per head and rotated by the fused kernel) and v,
    /// `[B, heads, L, D]`; `None` where the kernel cannot run (the plain ops then do the same).
    fn fused_qk(&self, x: &Tensor, rope: &GenRope) -> Option<(Tensor, Tensor, Tensor)> {
        let (cos, sin) = rope.half.as_ref()?;
        let y = self.gen_qkv.forward(x);
        let (b, l, _) = y.size3().ok()?;
        let d = y.size()[2] / (self.heads + 2 * self.kv_heads);
        let (hq, hk) = (self.heads, self.kv_heads);
        let qk = y.narrow(2, 0, (hq + hk) * d).view([b, l, hq + hk, d]);
        let eps = self.norm_added_q.eps();
        let (wq, wk) = (self.norm_added_q.weight(), self.norm_added_k.weight());
        let out = fastvideo_kernels::head_rope::head_rms_rope(&qk, &wq, &wk, hq, eps, cos, sin)?;
        let v = split_heads(&y.narrow(2, (hq + hk) * d, hk * d), hk);
        Some((out.narrow(2, 0, hq).transpose(1, 2), out.narrow(2, hq, hk).transpose(1, 2), v))
    }

    /// `k, v` repeated over their query-head groups.
    fn grouped(&self, k: Tensor, v: Tensor) -> (Tensor, Tensor) {
        let g = self.heads / self.kv_heads;
        if g == 1 {
            return (k, v);
        }
        (k.repeat_interleave_self_int(g, 1, None), v.repeat_interleave_self_int(g, 1, None))
    }

    /// The text pathway of one prompt, `x [1, L, C]` (normalised) with rope tables `[L, D]`:
    /// the keys and values the generation queries read, and — unless `keys_only` (the last
    /// layer, whose text output nothing reads) — the causal attention's output added into
    /// `residual`.
    pub fn prefix(&self, x: &Tensor, residual: &Tensor, rope: (&Tensor, &Tensor), keys_only: bool) -> LayerKv {
        let (q, k, v) = self.split(&self.und_qkv, x);
        let (q, k) = match (&self.norm_q, &self.norm_k) {
            (Some(nq), Some(nk)) => (nq.forward(&q), nk.forward(&k)),
            _ => (q, k),
        };
        let k_for_gen = match &self.k_norm_und_for_gen {
            Some(n) => MRope::apply(&n.forward(&k), rope.0, rope.1),
            None => MRope::apply(&k, rope.0, rope.1),
        };
        if !keys_only {
            let q = MRope::apply(&q, rope.0, rope.1);
            let k = match self.k_norm_und_for_gen {
                Some(_) => MRope::apply(&k, rope.0, rope.1),
                None => k_for_gen.shallow_clone(),
            };
            let (kg, vg) = self.grouped(k, v.shallow_clone());
            let o = Tensor::scaled_dot_product_attention(&q, &kg, &vg, None::<Tensor>, 0.0, true, None, false);
            self.und_out.forward_add(residual, &merge_heads(&o));
        }
        LayerKv { k: k_for_gen.contiguous(), v: v.contiguous() }
    }

    /// The generation pathway of `B` branches, `x [B, L, C]` (normalised) with rope tables
    /// `[B, 1, L, D]`; branch `b` attends over `prefixes[b]` and its own tokens. The output is
    /// added into `residual`.
    pub fn generation(&self, x: &Tensor, residual: &Tensor, rope: &GenRope, prefixes: &[&LayerKv]) {
        let (q, k, v) = match self.fused_qk(x, rope) {
            Some(qkv) => qkv,
            None => {
                let (q, k, v) = self.split(&self.gen_qkv, x);
                let q = MRope::apply(&self.norm_added_q.forward(&q), &rope.cos, &rope.sin);
                let k = MRope::apply(&self.norm_added_k.forward(&k), &rope.cos, &rope.sin);
                (q, k, v)
            }
        };
        let repeat = repeat_kv(x.device());
        let outs: Vec<Tensor> = prefixes
            .iter()
            .enumerate()
            .map(|(b, p)| {
                let b = b as i64;
                let keys = Tensor::cat(&[&p.k, &k.narrow(0, b, 1)], 2);
                let values = Tensor::cat(&[&p.v, &v.narrow(0, b, 1)], 2);
                let (keys, values) = if repeat { self.grouped(keys, values) } else { (keys, values) };
                let gqa = !repeat && self.heads != self.kv_heads;
                Tensor::scaled_dot_product_attention(
                    &q.narrow(0, b, 1),
                    &keys,
                    &values,
                    None::<Tensor>,
                    0.0,
                    false,
                    None,
                    gqa,
                )
            })
            .collect();
        let o = if outs.len() == 1 { outs.into_iter().next().unwrap() } else { Tensor::cat(&outs, 0) };
        self.gen_out.forward_add(residual, &merge_heads(&o));
    }
}
