//! The prompt encoder: the user's prompt in the Qwen3 chat template (thinking off), padded
//! to 512 tokens, through the Qwen3 text encoder; the hidden states of layers 9, 18 and 27
//! side by side per token are the transformer's text input (all 512 positions, padding too).

use std::path::Path;

use anyhow::{anyhow, bail, Result};
use fastvideo_qwen::{ChatTokenizer, Message, QwenForCausalLM};
use tch::{Device, Kind, Tensor};

/// Tokens every prompt is padded (or cut) to.
pub const MAX_TOKENS: usize = 512;

/// The text encoder's layers the pipeline reads (`text_encoder_out_layers`).
pub const LAYERS: [usize; 3] = [9, 18, 27];

/// The Qwen3 encoder and its tokenizer.
pub struct PromptEncoder {
    lm: QwenForCausalLM,
    tokenizer: ChatTokenizer,
    pad_id: i64,
}

// SAFETY: read-only after loading (see `QwenForCausalLM`).
unsafe impl Sync for PromptEncoder {}

impl PromptEncoder {
    /// Loads `text_encoder/` and `tokenizer/` of a folder.
    pub fn load(text_encoder: &Path, tokenizer: &Path, device: Device, kind: Kind) -> Result<Self> {
        let lm = QwenForCausalLM::load(text_encoder, device, kind)?;
        Self::new(lm, tokenizer).map_err(|e| e.context(format!("{}", text_encoder.display())))
    }

    /// The encoder on a loaded Qwen3 `lm` with the tokenizer folder `tokenizer`.
    pub fn new(lm: QwenForCausalLM, tokenizer: &Path) -> Result<Self> {
        let tok = ChatTokenizer::load(tokenizer)?;
        if !tok.has_template() {
            bail!("{}: no chat template (chat_template.jinja or tokenizer_config.json)", tokenizer.display());
        }
        if tok.padding_side() != "right" {
            bail!("{}: `padding_side` {:?} is not served (right)", tokenizer.display(), tok.padding_side());
        }
        let pad = tok.pad_token().ok_or_else(|| anyhow!("{}: names no `pad_token`", tokenizer.display()))?;
        let pad_id = tok
            .token_id(pad)
            .ok_or_else(|| anyhow!("{}: pad token {pad:?} is not in the vocabulary", tokenizer.display()))?;
        let layers = lm.config.num_hidden_layers as usize;
        if layers < LAYERS[2] {
            bail!("the text encoder has {layers} layers; FLUX.2 reads layer {}", LAYERS[2]);
        }
        Ok(Self { lm, tokenizer: tok, pad_id })
    }

    /// Width of one token's embedding (three layers' hidden states).
    pub fn width(&self) -> i64 {
        LAYERS.len() as i64 * self.lm.config.hidden_size
    }

    /// Token ids of `prompt` in the chat template, cut to [`MAX_TOKENS`], and how many are real
    /// before the padding.
    pub fn ids(&self, prompt: &str) -> Result<(Vec<i64>, usize)> {
        let text = self.tokenizer.render_with(
            &[Message::new("user", prompt)],
            true,
            &serde_json::json!({"enable_thinking": false}),
        )?;
        let mut ids = self.tokenizer.encode(&text)?;
        ids.truncate(MAX_TOKENS);
        let real = ids.len();
        ids.resize(MAX_TOKENS, self.pad_id);
        Ok((ids, real))
    }

    /// `[B, 512, width]` embeddings of `prompts`, in the text encoder's dtype.
    pub fn encode(&self, prompts: &[&str]) -> Result<Tensor> {
        let mut rows = Vec::new();
        let mut lengths = Vec::new();
        for p in prompts {
            let (ids, real) = self.ids(p)?;
            rows.push(Tensor::from_slice(&ids));
            lengths.push(real as i64);
        }
        let tokens = Tensor::stack(&rows, 0).to_device(self.lm.device());
        let states = self.lm.hidden_states(&tokens, &lengths, &LAYERS)?;
        let (b, l, h) = states[0].size3()?;
        let stacked = Tensor::stack(&states, 1);
        Ok(stacked.permute([0, 2, 1, 3]).reshape([b, l, LAYERS.len() as i64 * h]))
    }
}
