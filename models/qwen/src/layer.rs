//! One decoder layer: pre-norm attention and pre-norm SwiGLU, each added to the residual stream.
//! The stream is updated in place (each add rides the matmul before it), so the layers take it
//! by value and hand it on.

use anyhow::Result;
use fastvideo_pipeline::token::{KvStore, PagedBatch};
use fastvideo_torch::weights::Weights;
use tch::Tensor;

use crate::attention::Attention;
use crate::config::QwenConfig;
use crate::mlp::Mlp;
use crate::rms_norm::RmsNorm;

/// One decoder layer: pre-norm attention, then pre-norm SwiGLU.
pub struct DecoderLayer {
    input_layernorm: RmsNorm,
    self_attn: Attention,
    post_attention_layernorm: RmsNorm,
    mlp: Mlp,
}

impl DecoderLayer {
    /// Reads the layer's norms, attention and MLP under `w` (`model.layers.{i}`).
    pub fn new(w: &Weights, c: &QwenConfig) -> Result<Self> {
        Ok(Self {
            input_layernorm: RmsNorm::new(&w.pp("input_layernorm"), c.hidden_size, c.rms_norm_eps)?,
            self_attn: Attention::new(&w.pp("self_attn"), c)?,
            post_attention_layernorm: RmsNorm::new(&w.pp("post_attention_layernorm"), c.hidden_size, c.rms_norm_eps)?,
            mlp: Mlp::new(&w.pp("mlp"), c.hidden_size, c.intermediate_size)?,
        })
    }

    /// A layer on weights another model holds (see [`crate::shared`]).
    pub(crate) fn from_shared(l: crate::shared::SharedLayer, c: &QwenConfig) -> Self {
        let eps = c.rms_norm_eps;
        let norm = |w: Tensor, heads: i64| (RmsNorm::from_weight(w, eps), heads);
        let qk_norm =
            RmsNorm::over_heads(&[norm(l.q_norm, c.num_attention_heads), norm(l.k_norm, c.num_key_value_heads)]);
        Self {
            input_layernorm: RmsNorm::from_weight(l.input_layernorm, eps),
            self_attn: Attention::from_parts(l.qkv, l.o, qk_norm, c),
            post_attention_layernorm: RmsNorm::from_weight(l.post_attention_layernorm, eps),
            mlp: Mlp::from_parts(l.gate_up, l.down, c.intermediate_size),
        }
    }

    /// The feed-forward half, added into `h`.
    fn mlp(&self, h: Tensor) -> Tensor {
        self.mlp.forward_add(&h, &self.post_attention_layernorm.forward(&h));
        h
    }

    /// `x [B, T, C]` (a tensor no one else reads: it is overwritten) through the layer.
    pub fn forward(
        &self,
        x: Tensor,
        rope: (&Tensor, &Tensor),
        cache: &mut dyn KvStore,
        index: usize,
    ) -> Result<Tensor> {
        self.self_attn.forward(&self.input_layernorm.forward(&x), &x, rope, cache, index)?;
        Ok(self.mlp(x))
    }

    /// [`Self::forward`] for one new token of each of several requests on one block pool (see
    /// `Attention::forward_paged`).
    pub fn forward_paged(&self, x: Tensor, rope: (&Tensor, &Tensor), batch: &PagedBatch, index: usize) -> Tensor {
        self.self_attn.forward_paged(&self.input_layernorm.forward(&x), &x, rope, batch, index);
        self.mlp(x)
    }

    /// `x [B, T, C]` through the layer with attention limited by `mask` (see
    /// `Attention::forward_masked`), no cache.
    pub fn forward_masked(&self, x: Tensor, rope: (&Tensor, &Tensor), mask: &Tensor) -> Tensor {
        self.self_attn.forward_masked(&self.input_layernorm.forward(&x), &x, rope, mask);
        self.mlp(x)
    }

    /// [`Self::forward`] for one new token of each of several requests (see
    /// `Attention::forward_rows`).
    pub fn forward_rows(
        &self,
        x: Tensor,
        rope: (&Tensor, &Tensor),
        caches: &mut [&mut dyn KvStore],
        index: usize,
    ) -> Result<Tensor> {
        self.self_attn.forward_rows(&self.input_layernorm.forward(&x), &x, rope, caches, index)?;
        Ok(self.mlp(x))
    }
}
