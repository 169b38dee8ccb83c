//! A loaded language-model folder (weights, tokenizer, chat template, stop tokens) and one chat
//! completion run to the end through the decode loop's [`Generation`], text streamed as it
//! grows. What `fastvideo chat` runs; the server's chat route will run the same generation
//! through the step scheduler.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{ensure, Context, Result};
use fastvideo_pipeline::token::{DecodeParams, FinishReason, Generation};
use fastvideo_request::chat::{IncrementalText, StopText};
use tch::{Device, Kind};

use crate::{ChatTokenizer, Message, QwenForCausalLM};

/// Prompt tokens per prefill step.
pub const PREFILL_CHUNK: usize = 512;

/// A loaded language model and its tokenizer, ready to run chat completions.
pub struct LanguageModel {
    /// The decoder, shared with the decode loop's requests.
    pub model: Arc<QwenForCausalLM>,
    /// The tokenizer and chat template.
    pub tokenizer: Arc<ChatTokenizer>,
    /// The tokenizer's EOS and `generation_config.json`'s `eos_token_id`s.
    stop: Vec<i64>,
    device: Device,
}

/// A finished completion.
#[derive(Debug)]
pub struct Reply {
    /// The visible text: up to the first stop string.
    pub text: String,
    /// Tokens of the templated prompt.
    pub prompt_tokens: usize,
    /// Tokens generated.
    pub completion_tokens: usize,
    /// Why it ended: a stop token or string, or the token limit.
    pub finish_reason: FinishReason,
    /// Wall time from the start of the prompt's prefill to the end.
    pub seconds: f64,
}

impl LanguageModel {
    /// A transformers-layout folder: `config.json`, `model.safetensors` (or shards),
    /// `tokenizer.json`, optionally `tokenizer_config.json`, `chat_template.jinja` and
    /// `generation_config.json`.
    pub fn load(dir: &Path, device: Device, kind: Kind) -> Result<Self> {
        ensure!(dir.join("config.json").is_file(), "{}: no config.json (a transformers model folder?)", dir.display());
        let model = Arc::new(QwenForCausalLM::load(dir, device, kind)?);
        let tokenizer = ChatTokenizer::load(dir)?;
        let mut stop: Vec<i64> = tokenizer.eos_token().and_then(|t| tokenizer.token_id(t)).into_iter().collect();
        if let Ok(text) = std::fs::read_to_string(dir.join("generation_config.json")) {
            let v: serde_json::Value =
                serde_json::from_str(&text).with_context(|| format!("{}/generation_config.json", dir.display()))?;
            match &v["eos_token_id"] {
                serde_json::Value::Number(n) => stop.extend(n.as_i64()),
                serde_json::Value::Array(a) => stop.extend(a.iter().filter_map(|x| x.as_i64())),
                _ => {}
            }
        }
        Ok(Self { model, tokenizer: Arc::new(tokenizer), stop, device })
    }

    /// A language model from a decoder built elsewhere (an omni model's reasoner on its own
    /// weights), its tokenizer and the tokens that end a reply.
    pub fn from_parts(model: Arc<QwenForCausalLM>, tokenizer: Arc<ChatTokenizer>, stop: Vec<i64>) -> Self {
        let device = model.device();
        Self { model, tokenizer, stop, device }
    }

    /// Token ids that end a generation: the tokenizer's EOS and `generation_config.json`'s.
    pub fn stop_tokens(&self) -> &[i64] {
        &self.stop
    }

    /// The chat template applied to `messages` (with the assistant's opening), tokenized.
    pub fn prompt_ids(&self, messages: &[Message]) -> Result<Vec<i64>> {
        ensure!(!messages.is_empty(), "messages: at least one message");
        let text = self.tokenizer.render(messages, true)?;
        self.tokenizer.encode(&text)
    }

    /// Runs a chat completion to its end; `on_text` receives the text as it grows (each call the
    /// new part). The reply ends at the first of the `stop` strings (left out of the text, as
    /// OpenAI's `stop` does); text that might begin one is held back until it is clear.
    pub fn chat(
        &self,
        messages: &[Message],
        params: &DecodeParams,
        stop: &[String],
        mut on_text: impl FnMut(&str),
    ) -> Result<Reply> {
        let mut text_out = StopText::new(stop.to_vec()).map_err(|e| anyhow::anyhow!("{e}"))?;
        // Decoded token by token (a token may end inside a multi-byte character: held back).
        let mut text = IncrementalText::default();
        let prompt = self.prompt_ids(messages)?;
        let prompt_tokens = prompt.len();
        let t0 = Instant::now();
        let mut g = Generation::new(self.model.as_ref(), prompt, params, &self.stop)?;
        tch::no_grad(|| -> Result<()> {
            while g.finish().is_none() {
                let Some(token) = g.step(self.model.as_ref(), self.device, PREFILL_CHUNK)? else {
                    continue;
                };
                let new = text_out.update(text.push(self.tokenizer.as_ref(), token));
                if text_out.stopped() {
                    g.finish_now(FinishReason::Stop);
                }
                if !new.is_empty() {
                    on_text(&new);
                }
            }
            Ok(())
        })?;
        // What was held back, once no stop string can follow.
        let rest = text_out.finish(&text.finish(self.tokenizer.as_ref()));
        if !rest.is_empty() {
            on_text(&rest);
        }
        let text = text_out.shown().to_string();
        Ok(Reply {
            text,
            prompt_tokens,
            completion_tokens: g.tokens().len(),
            finish_reason: g.finish().expect("finished"),
            seconds: t0.elapsed().as_secs_f64(),
        })
    }
}
