//! One `WanTransformerBlock`: adaLN-modulated self-attention, cross-attention to the text and
//! the gated GELU feed-forward, with the fused norm/residual kernels.

use anyhow::Result;
use fastvideo_layers::sequence_parallel::SequenceShard;
use fastvideo_layers::{Linear, Lora};
use tch::{Kind, Tensor};

use super::attention::{Cross, CrossAttention, KeyValues, Keys, SelfAttention};
use super::config::TransformerConfig;
use super::rope::Rope;
use crate::weights::Weights;

/// One `WanTransformerBlock`. The modulation table and the cross-attention norm stay float32
/// (diffusers' `_keep_in_fp32_modules`); every norm and residual add runs in float32 and rounds
/// once, through the fused kernels of `fastvideo_kernels` (tch ops off CUDA).
pub struct Block {
    norm2: Option<(Tensor, Tensor)>,
    attn1: SelfAttention,
    attn2: CrossAttention,
    ffn_in: Linear,
    ffn_out: Linear,
    scale_shift_table: Tensor,
    eps: f64,
}

impl Block {
    pub(super) fn new(w: &Weights, cfg: &TransformerConfig) -> Result<Self> {
        let dim = cfg.inner_dim();
        let heads = cfg.num_attention_heads;
        let fp32 = w.with_kind(Kind::Float);
        Ok(Self {
            attn1: SelfAttention::new(&w.pp("attn1"), dim, heads, cfg.eps)?,
            norm2: if cfg.cross_attn_norm {
                Some((fp32.get("norm2.weight", &[dim])?, fp32.get("norm2.bias", &[dim])?))
            } else {
                None
            },
            attn2: CrossAttention::new(&w.pp("attn2"), dim, heads, cfg.eps, cfg.added_kv_proj_dim.is_some())?,
            ffn_in: Linear::new(&w.pp("ffn.net.0.proj"), dim, cfg.ffn_dim, true)?,
            ffn_out: Linear::new(&w.pp("ffn.net.2"), cfg.ffn_dim, dim, true)?,
            scale_shift_table: fp32.get("scale_shift_table", &[1, 6, dim])?,
            eps: cfg.eps,
        })
    }

    /// One block over `inputs`: `temb6` is the per-sample modulation `[B, 6, dim]` (any dtype;
    /// added to the table in fp32), `shard` a sequence-parallel rank's slice, if any.
    pub fn forward(&self, x: &Tensor, inputs: &BlockInputs) -> Result<Tensor> {
        let keys = inputs.shard.map_or(Keys::OWN, Keys::Sharded);
        let cross = match inputs.image {
            Some(image) => Cross::TextImage(inputs.context, image),
            None => Cross::Text(inputs.context),
        };
        let call =
            Call { context: cross, temb6: inputs.temb6, rope: inputs.rope, keys, keep_kv: false, lora: inputs.lora };
        Ok(self.run(x, call)?.0)
    }

    /// The block with what a causal rollout needs: `temb6` may be per token (`[B, N, 6, dim]`, one
    /// timestep per frame), `keys` go to the self-attention, and with `keep_kv` the
    /// self-attention's keys and values come back beside the output.
    pub fn forward_with(
        &self,
        x: &Tensor,
        context: Cross,
        temb6: &Tensor,
        rope: &Rope,
        keys: Keys,
        keep_kv: bool,
    ) -> Result<(Tensor, Option<KeyValues>)> {
        self.run(x, Call { context, temb6, rope, keys, keep_kv, lora: None })
    }

    /// The block on one call's inputs.
    pub(crate) fn run(&self, x: &Tensor, call: Call) -> Result<(Tensor, Option<KeyValues>)> {
        let Call { context, temb6, rope, keys, keep_kv, lora } = call;
        use fastvideo_kernels::{gated_residual, layer_norm_modulate, residual_layer_norm_modulate, LayerNormSpec};
        let m = modulation(&self.scale_shift_table, temb6, 6);
        let (shift, scale, gate, c_shift, c_scale, c_gate) = (&m[0], &m[1], &m[2], &m[3], &m[4], &m[5]);
        let eps = self.eps;
        // Each activation is dropped once used (shadowing would keep it to the end of the block):
        // at 32,760 tokens each is 0.1 GiB, the FFN's 0.55 GiB, and live ones add up in the peak.
        let (a, kv) = {
            let h = layer_norm_modulate(x, &LayerNormSpec { eps, affine: None, modulation: Some((scale, shift)) });
            self.attn1.forward(&h, rope, keys, keep_kv, lora)?
        };
        let (x1, h) = match &self.norm2 {
            Some((w, b)) => residual_layer_norm_modulate(
                x,
                &a,
                Some(gate),
                &LayerNormSpec { eps, affine: Some((w, b)), modulation: None },
            ),
            None => {
                let x = gated_residual(x, &a, Some(gate));
                let h = x.shallow_clone();
                (x, h)
            }
        };
        drop(a);
        let a = self.attn2.forward(&h, context, lora)?;
        drop(h);
        let (x2, h) = residual_layer_norm_modulate(
            &x1,
            &a,
            None,
            &LayerNormSpec { eps, affine: None, modulation: Some((c_scale, c_shift)) },
        );
        drop((x1, a));
        let ff = self.feed_forward(h, lora);
        Ok((gated_residual(&x2, &ff, Some(c_gate)), kv))
    }
}

impl Block {
    /// `ffn_out(gelu_tanh(ffn_in(h)))`. With FP8 linears and no adapters, the GELU and the
    /// quantization for `ffn_out` are one kernel pass over the widest activation.
    fn feed_forward(&self, h: Tensor, lora: Lora) -> Tensor {
        if self.ffn_out.is_fp8() && lora.is_none() {
            let pre = self.ffn_in.forward(&h);
            drop(h);
            let q = fastvideo_kernels::fp8::gelu_quantize(&pre);
            drop(pre);
            return self.ffn_out.forward_quantized(&q).expect("an FP8 linear");
        }
        let g = self.ffn_in.forward_gelu_tanh_lora(&h, lora);
        drop(h);
        self.ffn_out.forward_lora(&g, lora)
    }

    /// Keys and values of `context` for this block's cross-attention.
    pub fn context_kv(&self, context: &Tensor) -> (Tensor, Tensor) {
        self.attn2.context_kv(context, None)
    }

    /// [`context_kv`](Self::context_kv) with adapters.
    pub(crate) fn context_kv_lora(&self, context: &Tensor, lora: Lora) -> (Tensor, Tensor) {
        self.attn2.context_kv(context, lora)
    }

    pub(super) fn set_int8_attention(&mut self, pv: Option<fastvideo_kernels::attention8::Pv>) {
        self.attn1.int8 = pv;
    }

    /// Every linear of the block, in a fixed order (merging adapters walks them).
    /// Stores every linear of the block in FP8 (see [`Linear::quantize_fp8`]).
    pub(super) fn quantize_fp8(&mut self) {
        self.attn1.linears_mut().into_iter().chain(self.attn2.linears_mut()).for_each(Linear::quantize_fp8);
        self.ffn_in.quantize_fp8();
        self.ffn_out.quantize_fp8();
    }

    pub(super) fn linears<'a>(&'a self, out: &mut Vec<&'a Linear>) {
        self.attn1.linears(out);
        self.attn2.linears(out);
        out.extend([&self.ffn_in, &self.ffn_out]);
    }
}

/// `table [1, n, dim]` (fp32) plus the timestep modulation, split into its `n` parts: each
/// `[B, 1, dim]` for `temb [B, n, dim]`, or `[B, N, dim]` for per-token `temb [B, N, n, dim]`.
pub(super) fn modulation(table: &Tensor, temb: &Tensor, n: i64) -> Vec<Tensor> {
    let temb = temb.to_kind(Kind::Float);
    if temb.dim() == 4 {
        (table.unsqueeze(0) + temb).chunk(n, 2).into_iter().map(|t| t.squeeze_dim(2)).collect()
    } else {
        (table + temb).chunk(n, 1)
    }
}

/// One block call's inputs besides the hidden states.
pub(crate) struct Call<'a> {
    pub context: Cross<'a>,
    pub temb6: &'a Tensor,
    pub rope: &'a Rope,
    pub keys: Keys<'a>,
    pub keep_kv: bool,
    pub lora: Lora<'a>,
}

/// Everything a block needs besides the hidden states, computed once per forward.
pub struct BlockInputs<'a> {
    /// The projected text embeddings `[B, T, dim]`.
    pub context: &'a Tensor,
    /// The embedded image tokens `[B, T, dim]` of an image-conditioned model, if any.
    pub image: Option<&'a Tensor>,
    /// The per-sample modulation `[B, 6, dim]`.
    pub temb6: &'a Tensor,
    /// Rotary tables for the tokens this block sees.
    pub rope: &'a Rope,
    /// The sequence-parallel slice this rank holds (`rope` is already its rows), if any.
    pub shard: Option<&'a SequenceShard>,
    /// The adapters each row runs with (unmerged LoRA), if any.
    pub lora: Lora<'a>,
}
