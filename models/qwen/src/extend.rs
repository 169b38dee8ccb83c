//! Prompt extension: a language model rewrites a video request's prompt before the text encoder
//! reads it, as Wan's own repository does with Qwen2.5 (there to add detail; for the shipped
//! default model, to map free-form words onto the vocabulary it was trained on). The rewrite
//! runs as three nodes of the video pipeline, on the same engine and step scheduler as the
//! denoise loop, only for requests with `prompt_extend`:
//!
//! 1. `extend_tokenize`: the chat template applied to the prompt as the user's turn (after the
//!    folder's `system_prompt.txt`, if it has one), tokenized;
//! 2. [`EXTEND_NODE`]: the decode loop (greedy unless `node_params.prompt_extend` says otherwise);
//! 3. `extend_detokenize`: the reply's text as [`EXTENDED_PROMPT`], which `text_encode` reads in
//!    place of the prompt and the request's output records.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use fastvideo_pipeline::token::ARDecodeLoop;
pub use fastvideo_pipeline::EXTEND_NODE;
use fastvideo_pipeline::{Node, NodeCtx, Stage, Value, Values, EXTENDED_PROMPT};
use fastvideo_request::ResolvedRequest;
use tch::{Device, Kind, Tensor};

use crate::language_model::PREFILL_CHUNK;
use crate::{ChatTokenizer, LanguageModel, Message};

/// The folder file whose text, when present, is the rewriter's system turn.
pub const SYSTEM_PROMPT_FILE: &str = "system_prompt.txt";
/// Tokens a rewrite takes at most unless the request says (`node_params.prompt_extend.max_tokens`).
pub const DEFAULT_MAX_TOKENS: u32 = 128;

const PROMPT_IDS: &str = "extend_prompt_ids";
const REPLY_IDS: &str = "extend_reply_ids";

/// A prompt rewriter: the language model and its system turn.
pub struct PromptExtender {
    /// The rewriting model.
    pub lm: LanguageModel,
    /// The system turn from `system_prompt.txt`, if the folder has one.
    pub system: Option<String>,
}

impl PromptExtender {
    /// Loads a transformers-layout folder (as [`LanguageModel::load`]) and its optional
    /// `system_prompt.txt`.
    pub fn load(dir: &Path, device: Device, kind: Kind) -> Result<Self> {
        let lm = LanguageModel::load(dir, device, kind)?;
        anyhow::ensure!(lm.tokenizer.has_template(), "{}: no chat template to write the prompt into", dir.display());
        let path = dir.join(SYSTEM_PROMPT_FILE);
        let system = match std::fs::read_to_string(&path) {
            Ok(text) => Some(text.trim().to_string()).filter(|t| !t.is_empty()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e).with_context(|| format!("{}", path.display())),
        };
        Ok(Self { lm, system })
    }

    /// Why `prompt` cannot be rewritten: its chat through the template must leave the model
    /// room for at least one token.
    pub fn check_prompt(&self, prompt: &str) -> Result<(), String> {
        let n = self.lm.prompt_ids(&messages(self.system.as_deref(), prompt)).map_err(|e| format!("{e:#}"))?.len();
        let max = self.lm.model.config.max_position_embeddings as usize;
        if n >= max {
            return Err(format!(
                "{n} tokens through the prompt extender's template, which takes {max} positions in all; shorten the \
                 prompt or leave out prompt_extend"
            ));
        }
        Ok(())
    }

    /// The pipeline nodes that rewrite the prompt, each run only for requests that ask.
    pub fn nodes(&self) -> Vec<Node> {
        let wants = |r: &ResolvedRequest| r.prompt_extend;
        let tokenize = Tokenize { tokenizer: self.lm.tokenizer.clone(), system: self.system.clone() };
        let decode = ARDecodeLoop::new(self.lm.model.clone(), PROMPT_IDS, REPLY_IDS, PREFILL_CHUNK)
            .with_stop(self.lm.stop_tokens().to_vec())
            .with_defaults(serde_json::json!({ "max_tokens": DEFAULT_MAX_TOKENS }));
        vec![
            Node::stage("extend_tokenize", Arc::new(tokenize), &[], &[PROMPT_IDS]).when(wants),
            Node::looped(EXTEND_NODE, Arc::new(decode), &[PROMPT_IDS], &[REPLY_IDS]).when(wants),
            Node::stage(
                "extend_detokenize",
                Arc::new(Detokenize(self.lm.tokenizer.clone())),
                &[REPLY_IDS],
                &[EXTENDED_PROMPT],
            )
            .when(wants),
        ]
    }
}

fn messages(system: Option<&str>, prompt: &str) -> Vec<Message> {
    let mut m: Vec<Message> = system.map(|s| Message::new("system", s)).into_iter().collect();
    m.push(Message::new("user", prompt));
    m
}

struct Tokenize {
    tokenizer: Arc<ChatTokenizer>,
    system: Option<String>,
}

impl Stage for Tokenize {
    fn run(&self, ctx: &NodeCtx, values: &mut Values) -> Result<()> {
        let text = self.tokenizer.render(&messages(self.system.as_deref(), &ctx.request.prompt), true)?;
        let ids = self.tokenizer.encode(&text)?;
        values.insert(PROMPT_IDS, Value::Tensor(Tensor::from_slice(&ids)));
        Ok(())
    }
}

struct Detokenize(Arc<ChatTokenizer>);

impl Stage for Detokenize {
    fn run(&self, ctx: &NodeCtx, values: &mut Values) -> Result<()> {
        let ids: Vec<i64> = Vec::try_from(values.tensor(REPLY_IDS)?.to_kind(Kind::Int64).view([-1]))?;
        let text = self.0.decode(&ids)?.trim().to_string();
        // A rewriter that says nothing leaves the prompt as it was (and the output says so).
        let text = if text.is_empty() { ctx.request.prompt.clone() } else { text };
        values.insert(EXTENDED_PROMPT, Value::Text(text));
        Ok(())
    }
}

impl fastvideo_family::PromptRewriter for PromptExtender {
    fn nodes(&self) -> Vec<Node> {
        PromptExtender::nodes(self)
    }

    fn check_prompt(&self, prompt: &str) -> Result<(), String> {
        PromptExtender::check_prompt(self, prompt)
    }
}
