//! The text encoder's tokenizer: a `tokenizer.json` read with the `tokenizers` crate, used the
//! way diffusers pipelines call it (Wan's, for one) — cleaned prompt, special tokens added,
//! truncated and padded to a fixed length, with an attention mask.

use std::path::Path;

use anyhow::{anyhow, Result};
use tch::{Device, Tensor};
use tokenizers::{PaddingDirection, PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

/// The text encoder's tokenizer (`tokenizer/tokenizer.json`), padding and truncating as diffusers
/// does.
#[derive(Clone)]
pub struct TextTokenizer {
    inner: Tokenizer,
}

impl TextTokenizer {
    /// Reads a `tokenizer.json`.
    pub fn from_file(path: &Path) -> Result<Self> {
        let inner =
            Tokenizer::from_file(path).map_err(|e| anyhow!("{}: not a usable tokenizer.json ({e})", path.display()))?;
        Ok(Self { inner })
    }

    /// `(input_ids [B, max_len], mask [B, max_len])` as int64 tensors: prompts cleaned
    /// ([`clean_prompt`]), padded on the right.
    pub fn encode(&self, prompts: &[String], max_len: usize, device: Device) -> Result<(Tensor, Tensor)> {
        let cleaned: Vec<String> = prompts.iter().map(|p| clean_prompt(p)).collect();
        self.encode_padded(cleaned, max_len, PaddingDirection::Right, device)
    }

    /// [`Self::encode`] as chat-style pipelines (LTX-2's Gemma) call it: prompts only stripped,
    /// padded on the left, so every prompt's last token sits at the end.
    pub fn encode_left(&self, prompts: &[String], max_len: usize, device: Device) -> Result<(Tensor, Tensor)> {
        let stripped: Vec<String> = prompts.iter().map(|p| p.trim().to_string()).collect();
        self.encode_padded(stripped, max_len, PaddingDirection::Left, device)
    }

    fn encode_padded(
        &self,
        prompts: Vec<String>,
        max_len: usize,
        direction: PaddingDirection,
        device: Device,
    ) -> Result<(Tensor, Tensor)> {
        let mut tok = self.inner.clone();
        let pad_id = tok.token_to_id("<pad>").unwrap_or(0);
        tok.with_truncation(Some(TruncationParams { max_length: max_len, ..Default::default() }))
            .map_err(|e| anyhow!("tokenizer truncation: {e}"))?;
        tok.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::Fixed(max_len),
            direction,
            pad_id,
            ..Default::default()
        }));
        let n = prompts.len();
        let enc = tok.encode_batch(prompts, true).map_err(|e| anyhow!("tokenizing prompt: {e}"))?;
        let ids: Vec<i64> = enc.iter().flat_map(|e| e.get_ids().iter().map(|&i| i as i64)).collect();
        let mask: Vec<i64> = enc.iter().flat_map(|e| e.get_attention_mask().iter().map(|&i| i as i64)).collect();
        let shape = [n as i64, max_len as i64];
        Ok((
            Tensor::from_slice(&ids).view(shape).to_device(device),
            Tensor::from_slice(&mask).view(shape).to_device(device),
        ))
    }
}

impl TextTokenizer {
    /// The words of `prompt` the vocabulary does not have (they encode to its unknown token, so
    /// the model sees none of them), in order, each once. Empty when the tokenizer has no
    /// unknown token or every word is known. Repeats differing only in case count once.
    pub fn unknown_words(&self, prompt: &str) -> Vec<String> {
        let Some(unk) = ["<unk>", "[UNK]", "<UNK>"].iter().find_map(|t| self.inner.token_to_id(t)) else {
            return Vec::new();
        };
        let cleaned = clean_prompt(prompt);
        let Ok(enc) = self.inner.encode(cleaned.as_str(), false) else { return Vec::new() };
        let mut out: Vec<String> = Vec::new();
        for (&id, &(start, end)) in enc.get_ids().iter().zip(enc.get_offsets()) {
            if id == unk {
                let word = cleaned.get(start..end).unwrap_or_default().to_string();
                if !word.is_empty() && !out.iter().any(|w| w.to_lowercase() == word.to_lowercase()) {
                    out.push(word);
                }
            }
        }
        out
    }
}

/// The pipeline's `prompt_clean`: HTML entities unescaped (common ones), whitespace collapsed.
pub fn clean_prompt(text: &str) -> String {
    let unescaped = text
        .replace("&amp;", "&")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'");
    unescaped.split_whitespace().collect::<Vec<_>>().join(" ")
}
