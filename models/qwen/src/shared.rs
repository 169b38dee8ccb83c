//! The weights of a Qwen3 decoder that another model already holds: an omni model whose text
//! pathway is a Qwen3 language model (Cosmos3's understanding stream) serves chats through
//! [`QwenForCausalLM::from_shared`](crate::QwenForCausalLM::from_shared) on the same tensors,
//! one copy for its denoiser and its reasoner. Linear layouts are the fused ones this crate
//! runs: q, k, v as one (in that order), gate and up as one.

use fastvideo_layers::Linear;
use tch::Tensor;

/// One decoder layer's weights.
pub struct SharedLayer {
    /// `input_layernorm.weight` `[hidden]`.
    pub input_layernorm: Tensor,
    /// q, k and v fused, outputs in that order.
    pub qkv: Linear,
    /// The attention's output projection.
    pub o: Linear,
    /// Per-head q norm `[head_dim]`.
    pub q_norm: Tensor,
    /// Per-head k norm `[head_dim]`.
    pub k_norm: Tensor,
    /// `post_attention_layernorm.weight` `[hidden]`.
    pub post_attention_layernorm: Tensor,
    /// gate then up, fused.
    pub gate_up: Linear,
    /// down.
    pub down: Linear,
}

/// A whole decoder's weights.
pub struct SharedWeights {
    /// `[vocab, hidden]`.
    pub embed_tokens: Tensor,
    /// Per layer.
    pub layers: Vec<SharedLayer>,
    /// The final norm `[hidden]`.
    pub norm: Tensor,
    /// `[vocab, hidden]`.
    pub lm_head: Tensor,
}
