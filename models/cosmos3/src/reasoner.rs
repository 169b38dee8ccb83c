//! The reasoner: the text pathway plus `lm_head`, served as a chat model through the decode
//! loop on the very tensors the denoiser reads (one copy in memory). With text-only positions
//! the interleaved mRoPE equals 1-D rope, so the pathway is exactly a Qwen3 decoder
//! (transformers' `Cosmos3OmniForConditionalGeneration` on text).

use std::sync::Arc;

use anyhow::Result;
use fastvideo_qwen::config::{Family, QwenConfig};
use fastvideo_qwen::{LanguageModel, QwenForCausalLM};

use crate::prompt::PromptBuilder;
use crate::transformer::Cosmos3Transformer;

/// The system turn of a prompt rewrite (`prompt_extend`): the reasoner expands a short prompt
/// into the detailed description the generation pathway was trained on.
pub const REWRITE_SYSTEM: &str =
    "You expand a short video prompt into one detailed paragraph describing the subjects, \
their motion, the setting, the lighting and the camera. Answer with the paragraph only.";

/// Positions a chat may use: the published model's context (its rope is not scaled).
pub const MAX_POSITIONS: i64 = 32_768;

/// The Qwen3 configuration of the text pathway of `c` (`eos`: the end-of-turn token).
pub fn qwen_config(c: &crate::Cosmos3Config, eos: i64) -> QwenConfig {
    QwenConfig {
        family: Family::Qwen3,
        vocab_size: c.vocab_size,
        hidden_size: c.hidden_size,
        intermediate_size: c.intermediate_size,
        num_hidden_layers: c.num_hidden_layers,
        num_attention_heads: c.num_attention_heads,
        num_key_value_heads: c.num_key_value_heads,
        head_dim: c.head_dim,
        rms_norm_eps: c.rms_norm_eps,
        rope_theta: c.rope_theta,
        max_position_embeddings: MAX_POSITIONS,
        tie_word_embeddings: false,
        qkv_bias: c.attention_bias,
        eos_token_ids: vec![eos],
    }
}

/// The reasoner on `t`'s weights with the folder's tokenizer; `None` for layouts whose text
/// pathway is not a Qwen3 decoder (Edge) or checkpoints without an LM head.
pub fn reasoner(t: &Cosmos3Transformer, prompts: &PromptBuilder) -> Result<Option<LanguageModel>> {
    let Some(weights) = t.text_weights() else { return Ok(None) };
    let c = t.config();
    let config = qwen_config(c, prompts.eos());
    anyhow::ensure!(!c.attention_bias, "Cosmos3 reasoner: attention biases are not a Qwen3 layout");
    let model = QwenForCausalLM::from_shared(config, weights, t.kind());
    let lm = LanguageModel::from_parts(Arc::new(model), Arc::clone(prompts.chat()), vec![prompts.eos()]);
    Ok(Some(lm))
}
