//! The prompt encoder: the prompt in the pipeline's template (a system message asking for a
//! detailed description, then the user's prompt), through Qwen2.5-VL's language model; the
//! last hidden state, after the final norm, without the template's first 34 tokens (the
//! system message), is the transformer's text input. No padding: each prompt keeps its length.

use std::path::Path;

use anyhow::{bail, Result};
use fastvideo_qwen::{ChatTokenizer, QwenForCausalLM};
use tch::{Device, Kind, Tensor};

/// The text-to-image template (`prompt_template_encode`).
pub const TEMPLATE: &str = "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, text, spatial relationships of the objects and background:<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n";

/// Template tokens dropped from the encoder's output (`prompt_template_encode_start_idx`).
pub const DROP: usize = 34;

/// Prompt tokens kept at most after the drop (`tokenizer_max_length`).
pub const MAX_TOKENS: usize = 1024;

/// The Qwen2.5-VL language model and its tokenizer.
pub struct PromptEncoder {
    lm: QwenForCausalLM,
    tokenizer: ChatTokenizer,
}

// SAFETY: read-only after loading (see `QwenForCausalLM`).
unsafe impl Sync for PromptEncoder {}

impl PromptEncoder {
    /// Loads `text_encoder/` and `tokenizer/` of a folder.
    pub fn load(text_encoder: &Path, tokenizer: &Path, device: Device, kind: Kind) -> Result<Self> {
        Self::new(QwenForCausalLM::load(text_encoder, device, kind)?, tokenizer)
    }

    /// The encoder on a loaded language model `lm` with the tokenizer folder `tokenizer`.
    pub fn new(lm: QwenForCausalLM, tokenizer: &Path) -> Result<Self> {
        Ok(Self { lm, tokenizer: ChatTokenizer::load(tokenizer)? })
    }

    /// Width of one token's embedding.
    pub fn width(&self) -> i64 {
        self.lm.config.hidden_size
    }

    /// Token ids of `prompt` in the template (cut, as the pipeline's tokenizer call, to
    /// `MAX_TOKENS + DROP`).
    pub fn ids(&self, prompt: &str) -> Result<Vec<i64>> {
        let mut ids = self.tokenizer.encode(&TEMPLATE.replace("{}", prompt))?;
        ids.truncate(MAX_TOKENS + DROP);
        if ids.len() <= DROP {
            bail!("the prompt template tokenized to {} tokens; the pipeline drops the first {DROP}", ids.len());
        }
        Ok(ids)
    }

    /// `[L, width]` embeddings of `prompt` (L = its templated tokens past the first 34), in the
    /// text encoder's dtype.
    pub fn encode(&self, prompt: &str) -> Result<Tensor> {
        let ids = self.ids(prompt)?;
        let tokens = Tensor::from_slice(&ids).unsqueeze(0).to_device(self.lm.device());
        let last = self.lm.config.num_hidden_layers as usize;
        let h = self.lm.hidden_states(&tokens, &[ids.len() as i64], &[last])?.pop().expect("one layer");
        Ok(h.get(0).narrow(0, DROP as i64, (ids.len() - DROP) as i64))
    }
}
