//! Prompts to the streams' text, as `LTX2Pipeline.encode_prompt` and its connectors make it:
//! stripped, tokenized with `<bos>`, left-padded to `max_sequence_length` (1024), every Gemma 3
//! hidden state stacked, then the text connectors.

use std::path::Path;

use anyhow::{Context, Result};
use fastvideo_layers::tokenizer::TextTokenizer;
use tch::{Device, Kind};

use crate::connectors::{ConnectedText, Ltx2Connectors};
use crate::gemma::GemmaEncoder;

/// The pipeline's `max_sequence_length` default: prompts are padded to it, and the connectors'
/// registers make the padded length part of the result.
pub const MAX_SEQUENCE_LENGTH: usize = 1024;

/// Tokenizer, Gemma 3 and the connectors of a folder.
pub struct PromptEncoder {
    tokenizer: TextTokenizer,
    /// Gemma 3's language model.
    pub gemma: GemmaEncoder,
    /// The text connectors.
    pub connectors: Ltx2Connectors,
    max_len: usize,
    /// The connectors' dtype: the stacked states are cast to it, as the pipeline casts them to
    /// the text encoder's (one dtype there).
    kind: Kind,
}

// SAFETY: the weights are read-only after construction and libtorch kernels may read one
// tensor from several threads; nothing here mutates shared state.
unsafe impl Sync for PromptEncoder {}

impl PromptEncoder {
    /// Reads `tokenizer/`, `text_encoder/` (in `text_kind`) and `connectors/` (in `kind`) of `dir`;
    /// prompts are padded to `max_len` tokens.
    pub fn load(dir: &Path, device: Device, kind: Kind, text_kind: Kind, max_len: usize) -> Result<Self> {
        let tok_path = dir.join("tokenizer/tokenizer.json");
        let tokenizer = TextTokenizer::from_file(&tok_path)?;
        let gemma = GemmaEncoder::load(&dir.join("text_encoder"), device, text_kind)?;
        let connectors = Ltx2Connectors::load(&dir.join("connectors"), device, kind)?;
        let layers = gemma.cfg.num_hidden_layers as i64 + 1;
        anyhow::ensure!(
            connectors.cfg.caption_channels == gemma.cfg.hidden_size && connectors.cfg.text_proj_in_factor == layers,
            "{}: the connectors take {} x {} channels; the text encoder gives {} x {} (hidden size x layers + 1)",
            dir.join("connectors/config.json").display(),
            connectors.cfg.caption_channels,
            connectors.cfg.text_proj_in_factor,
            gemma.cfg.hidden_size,
            layers
        );
        Ok(Self { tokenizer, gemma, connectors, max_len, kind })
    }

    /// Each prompt's text for both streams, in order (one row per prompt).
    pub fn encode(&self, prompts: &[String], device: Device) -> Result<ConnectedText> {
        let (ids, mask) = self.tokenizer.encode_left(prompts, self.max_len, device)?;
        let states = self.gemma.forward(&ids, &mask).context("text encoder")?;
        self.connectors.forward(&states.to_kind(self.kind), &mask).context("text connectors")
    }
}
