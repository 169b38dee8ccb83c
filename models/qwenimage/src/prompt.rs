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

/// Prompt embeddings the transformer reads at most (the pipeline's `max_sequence_length`).
pub const MAX_SEQUENCE: i64 = 512;

/// The first [`MAX_SEQUENCE`] rows of prompt embeddings, as the pipeline cuts them.
pub fn cut(embeds: Tensor) -> Tensor {
    let n = embeds.size()[0];
    if n > MAX_SEQUENCE {
        embeds.narrow(0, 0, MAX_SEQUENCE)
    } else {
        embeds
    }
}

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

    /// The tokenizer.
    pub fn tokenizer(&self) -> &ChatTokenizer {
        &self.tokenizer
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

    /// `[L, width]` embeddings of an edit's `prompt` with its `pictures` (the edit template;
    /// its first 64 tokens dropped).
    pub fn encode_edit(
        &self,
        edit: &crate::edit::EditEncoder,
        prompt: &str,
        pictures: &crate::edit::PictureTokens,
    ) -> Result<Tensor> {
        let ids = self.tokenizer.encode(&edit.text(prompt, pictures.len()))?;
        let device = self.lm.device();
        let (ids, positions) = edit.prompt_inputs(&ids, pictures, device)?;
        let features = &pictures.features;
        let n = ids.len();
        if n <= crate::edit::DROP {
            bail!("the edit template tokenized to {n} tokens; the pipeline drops the first {}", crate::edit::DROP);
        }
        let tokens = Tensor::from_slice(&ids).to_device(device);
        let mut x = self.lm.embed(&tokens.unsqueeze(0));
        // The pictures' tokens in place of their pads, in order.
        let at = tokens.eq(edit.image_pad()).nonzero().squeeze_dim(1);
        x = x.index_put_(&[Some(Tensor::zeros_like(&at)), Some(at)], &features.to_kind(x.kind()), false);
        let (cos, sin) = self.lm.rope().tables_3d(&positions, edit.sections(), x.kind());
        let last = self.lm.config.num_hidden_layers as usize;
        let h = self.lm.hidden_states_of(x, (&cos, &sin), &[n as i64], &[last])?.pop().expect("one layer");
        Ok(h.get(0).narrow(0, crate::edit::DROP as i64, (n - crate::edit::DROP) as i64))
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
