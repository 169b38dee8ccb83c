//! The block's attention layers: self-attention over the video tokens (rotary positions, fused
//! q/k norm, local or sequence-parallel keys) and cross-attention to the text, and what each
//! attends to besides its input.

use anyhow::Result;
use fastvideo_kernels::attention8::{self, Pv};
use fastvideo_layers::heads::{merge_heads, split_heads};
use fastvideo_layers::sequence_parallel::{ulysses_attention, SequenceShard};
use fastvideo_layers::{Linear, Lora};
use tch::Tensor;

use super::rope::Rope;
use crate::weights::Weights;

/// Self-attention with q/k RMSNorm across all heads and rotary positions. q and k come from one
/// fused projection (`to_q`/`to_k` concatenated at load), which the norm kernel reads in place;
/// v has its own projection so it is dense, as every SDPA backend expects without copying.
pub(super) struct SelfAttention {
    to_qk: Linear,
    to_v: Linear,
    to_out: Linear,
    norm_q: Tensor,
    norm_k: Tensor,
    heads: i64,
    eps: f64,
    /// 8-bit attention (`--int8-attention`) over the input's own keys, and earlier ones without a
    /// mask.
    pub(super) int8: Option<Pv>,
}

impl SelfAttention {
    pub(super) fn linears<'a>(&'a self, out: &mut Vec<&'a Linear>) {
        out.extend([&self.to_qk, &self.to_v, &self.to_out]);
    }

    pub(super) fn linears_mut(&mut self) -> Vec<&mut Linear> {
        vec![&mut self.to_qk, &mut self.to_v, &mut self.to_out]
    }

    pub(super) fn new(w: &Weights, dim: i64, heads: i64, eps: f64) -> Result<Self> {
        let qk = [Linear::new(&w.pp("to_q"), dim, dim, true)?, Linear::new(&w.pp("to_k"), dim, dim, true)?];
        Ok(Self {
            to_qk: Linear::concat(Vec::from(qk)),
            to_v: Linear::new(&w.pp("to_v"), dim, dim, true)?,
            to_out: Linear::new(&w.pp("to_out.0"), dim, dim, true)?,
            norm_q: w.get("norm_q.weight", &[dim])?,
            norm_k: w.get("norm_k.weight", &[dim])?,
            heads,
            eps,
            int8: None,
        })
    }

    /// Returns the output and, with `keep_kv`, this input's keys (normalised, rotated) and values
    /// for a causal rollout to keep (otherwise they are freed at once: held through the rest of the
    /// block they cost 0.3 GiB of peak memory at 480x832x81). `keys` says what else is attended:
    /// earlier frames and a mask, or the rest of a sequence other ranks hold.
    pub(super) fn forward(
        &self,
        x: &Tensor,
        rope: &Rope,
        keys: Keys,
        keep_kv: bool,
        lora: Lora,
    ) -> Result<(Tensor, Option<KeyValues>)> {
        let d = self.norm_q.size()[0];
        // Each intermediate is freed as soon as it is used (the fused projection right after the
        // norm, q/k/v before the output projection): at 32,760 tokens each is 0.1-0.2 GiB, and
        // they add up in the peak.
        // FP8 projections (`--fp8-linears`) share one quantization of their input.
        let xq = self.to_qk.is_fp8().then(|| fastvideo_kernels::fp8::quantize(x));
        let (q, k) = {
            let qk = self.to_qk.forward_shared(x, xq.as_ref(), lora);
            let mut qk = fastvideo_kernels::rms_norm_rope(
                &[(&qk.narrow(2, 0, d), &self.norm_q), (&qk.narrow(2, d, d), &self.norm_k)],
                self.eps,
                d / self.heads,
                Some((&rope.cos, &rope.sin)),
            );
            let k = qk.pop().expect("k");
            (qk.pop().expect("q"), k)
        };
        let v = self.to_v.forward_shared(x, xq.as_ref(), lora);
        drop(xq);
        // Each arm gives the merged `[B, N, H*D]` the output projection reads.
        let o = match keys {
            Keys::Local { past, mask } => {
                let (keys, values) = match past {
                    Some((pk, pv)) => (Tensor::cat(&[pk, &k], 1), Tensor::cat(&[pv, &v], 1)),
                    None => (k.shallow_clone(), v.shallow_clone()),
                };
                match (self.int8, mask) {
                    (Some(pv), None) => int8_attention(&q, &keys, &values, self.heads, pv),
                    _ => merge_heads(&attention(&q, &keys, &values, self.heads, mask)),
                }
            }
            Keys::Sharded(shard) => merge_heads(&ulysses_attention(&q, &k, &v, self.heads, shard)?),
        };
        drop(q);
        let kept = keep_kv.then_some((k, v));
        Ok((self.to_out.forward_lora(&o, lora), kept))
    }
}

/// Cross-attention to the text: q from the video tokens, k and v from the context, q and k
/// RMS-normalised across heads, no rotary positions. Image-conditioned models (Wan 2.1 I2V and
/// FLF2V) also attend, with the same query, to the embedded image through their own key/value
/// projections; the two attention outputs are summed before the output projection.
pub(super) struct CrossAttention {
    to_q: Linear,
    to_k: Linear,
    to_v: Linear,
    to_out: Linear,
    norm_q: Tensor,
    norm_k: Tensor,
    image: Option<ImageKeys>,
    heads: i64,
    eps: f64,
}

/// `add_k_proj`, `add_v_proj` and `norm_added_k` (there is no `norm_added_q`: the text's
/// normalised query is reused).
struct ImageKeys {
    add_k: Linear,
    add_v: Linear,
    norm_k: Tensor,
}

impl CrossAttention {
    pub(super) fn linears<'a>(&'a self, out: &mut Vec<&'a Linear>) {
        out.extend([&self.to_q, &self.to_k, &self.to_v, &self.to_out]);
        if let Some(ik) = &self.image {
            out.extend([&ik.add_k, &ik.add_v]);
        }
    }

    pub(super) fn linears_mut(&mut self) -> Vec<&mut Linear> {
        let mut out = vec![&mut self.to_q, &mut self.to_k, &mut self.to_v, &mut self.to_out];
        if let Some(ik) = &mut self.image {
            out.extend([&mut ik.add_k, &mut ik.add_v]);
        }
        out
    }

    /// `image_kv`: whether the checkpoint has the image projections (`added_kv_proj_dim` set).
    pub(super) fn new(w: &Weights, dim: i64, heads: i64, eps: f64, image_kv: bool) -> Result<Self> {
        let image = if image_kv {
            Some(ImageKeys {
                add_k: Linear::new(&w.pp("add_k_proj"), dim, dim, true)?,
                add_v: Linear::new(&w.pp("add_v_proj"), dim, dim, true)?,
                norm_k: w.get("norm_added_k.weight", &[dim])?,
            })
        } else {
            None
        };
        Ok(Self {
            to_q: Linear::new(&w.pp("to_q"), dim, dim, true)?,
            to_k: Linear::new(&w.pp("to_k"), dim, dim, true)?,
            to_v: Linear::new(&w.pp("to_v"), dim, dim, true)?,
            to_out: Linear::new(&w.pp("to_out.0"), dim, dim, true)?,
            norm_q: w.get("norm_q.weight", &[dim])?,
            norm_k: w.get("norm_k.weight", &[dim])?,
            image,
            heads,
            eps,
        })
    }

    /// The text's keys (normalised) and values: what a session computes once and reuses.
    pub(super) fn context_kv(&self, context: &Tensor, lora: Lora) -> (Tensor, Tensor) {
        let hd = self.norm_q.size()[0] / self.heads;
        let k = self.to_k.forward_lora(context, lora);
        let mut k = fastvideo_kernels::rms_norm_rope(&[(&k, &self.norm_k)], self.eps, hd, None);
        (k.pop().expect("k"), self.to_v.forward_lora(context, lora))
    }

    pub(super) fn forward(&self, x: &Tensor, context: Cross, lora: Lora) -> Result<Tensor> {
        let hd = self.norm_q.size()[0] / self.heads;
        let q = self.to_q.forward_lora(x, lora);
        let q = fastvideo_kernels::rms_norm_rope(&[(&q, &self.norm_q)], self.eps, hd, None);
        let o = match context {
            Cross::Text(c) => {
                let (k, v) = self.context_kv(c, lora);
                attention(&q[0], &k, &v, self.heads, None)
            }
            Cross::Kv(k, v) => attention(&q[0], k, v, self.heads, None),
            Cross::TextImage(c, image) => {
                let Some(ik) = &self.image else {
                    anyhow::bail!("transformer: an image context was given to a model without image projections");
                };
                let (k, v) = self.context_kv(c, lora);
                let text = attention(&q[0], &k, &v, self.heads, None);
                drop((k, v));
                let k = ik.add_k.forward_lora(image, lora);
                let mut k = fastvideo_kernels::rms_norm_rope(&[(&k, &ik.norm_k)], self.eps, hd, None);
                let k = k.pop().expect("k");
                text + attention(&q[0], &k, &ik.add_v.forward_lora(image, lora), self.heads, None)
            }
        };
        drop(q);
        Ok(self.to_out.forward_lora(&merge_heads(&o), lora))
    }
}

/// A self-attention's keys and values (`[B, N, H*D]` each).
pub type KeyValues = (Tensor, Tensor);

/// What a self-attention attends to besides its own input's keys.
#[derive(Clone, Copy)]
pub enum Keys<'a> {
    /// Keys/values of earlier frames (attended before this input's own; a causal rollout's) and
    /// a mask (`[N, M]`, true = attend) restricting which keys each query sees.
    Local {
        /// Earlier frames' keys and values, if any.
        past: Option<(&'a Tensor, &'a Tensor)>,
        /// Which keys each query sees (`[N, M]`, true = attend); all when absent.
        mask: Option<&'a Tensor>,
    },
    /// The whole sequence, of which this rank holds one slice (Ulysses sequence parallelism).
    Sharded(&'a SequenceShard),
}

impl Keys<'_> {
    /// The input's own keys only.
    pub const OWN: Keys<'static> = Keys::Local { past: None, mask: None };
}

/// What the cross-attention attends to: the projected text, or its keys and values computed
/// once (a causal session's).
#[derive(Clone, Copy)]
pub enum Cross<'a> {
    /// The projected text embeddings `[B, T, dim]`.
    Text(&'a Tensor),
    /// The text's keys and values, computed once for every chunk.
    Kv(&'a Tensor, &'a Tensor),
    /// The projected text and the embedded image (`[B, T, dim]`, an image-conditioned model's).
    TextImage(&'a Tensor, &'a Tensor),
}

/// 8-bit attention of `[B, N, H*D]` q, k, v over `heads` heads, merged back to `[B, N, H*D]`
/// (the kernel's `[B, N, H, D]` layout needs no transpose either way): the kernel on Hopper,
/// SDPA on other GPUs, and on a CPU the quantized function (float32 emulation) so that an
/// evaluation there measures what the kernel computes.
fn int8_attention(q: &Tensor, k: &Tensor, v: &Tensor, heads: i64, pv: Pv) -> Tensor {
    let split = |t: &Tensor| t.reshape([t.size()[0], t.size()[1], heads, -1]);
    let (q4, k4, v4) = (split(q), split(k), split(v));
    let o = match q.device() {
        tch::Device::Cpu => attention8::emulate(&q4, &k4, &v4, emulation(pv)).to_kind(q.kind()),
        _ => attention8::attention(&q4, &k4, &v4, pv),
    };
    o.reshape([o.size()[0], o.size()[1], -1])
}

/// The roundings the CPU emulates: the kernel's, or for tracing a quality loss to its source
/// the list in `FASTVIDEO_ATTN8_EMULATE` (`qk,p,v` or `qk,f16` and subsets: see
/// [`attention8::Emulation::parse`]), read once.
fn emulation(pv: Pv) -> attention8::Emulation {
    static CHOSEN: std::sync::OnceLock<Option<attention8::Emulation>> = std::sync::OnceLock::new();
    let chosen = CHOSEN.get_or_init(|| {
        let list = std::env::var("FASTVIDEO_ATTN8_EMULATE").ok()?;
        match attention8::Emulation::parse(&list) {
            Ok(e) => Some(e),
            Err(e) => {
                tracing::warn!("FASTVIDEO_ATTN8_EMULATE: {e}; emulating the kernel");
                None
            }
        }
    });
    chosen.unwrap_or_else(|| attention8::Emulation::of(pv))
}

/// `[B, N, H*D]` q, k, v → SDPA over heads → `[B, H, N, D]`. libtorch picks the backend (cuDNN's
/// fused attention for bf16 on Hopper, the fastest of the three measured: docs/benchmarks.md).
fn attention(q: &Tensor, k: &Tensor, v: &Tensor, heads: i64, mask: Option<&Tensor>) -> Tensor {
    let (q, k, v) = (split_heads(q, heads), split_heads(k, heads), split_heads(v, heads));
    Tensor::scaled_dot_product_attention(&q, &k, &v, mask, 0.0, false, None, false)
}
