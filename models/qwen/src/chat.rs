//! A language-model folder's tokenizer and chat template: `tokenizer.json` through the
//! `tokenizers` crate, the Jinja template from `chat_template.jinja` (where transformers 5 saves
//! it) or `tokenizer_config.json`'s `chat_template` (older folders), rendered with minijinja the
//! way transformers' `apply_chat_template` renders it (`messages`, `add_generation_prompt`,
//! `bos_token`, `eos_token`, `raise_exception`).

use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use anyhow::{anyhow, bail, ensure, Context, Result};
use serde::{Deserialize, Serialize};

/// One chat message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// `system`, `user` or `assistant` (whatever the template takes).
    pub role: String,
    /// The message's text.
    pub content: String,
}

impl Message {
    /// A message of `role` saying `content`.
    pub fn new(role: &str, content: &str) -> Self {
        Self { role: role.into(), content: content.into() }
    }
}

/// A folder's tokenizer and chat template, applied as transformers' `apply_chat_template` does.
pub struct ChatTokenizer {
    tokenizer: tokenizers::Tokenizer,
    template: Option<String>,
    bos_token: Option<String>,
    eos_token: Option<String>,
    pad_token: Option<String>,
    padding_side: Option<String>,
    /// The last few prompts' ids: a served request's prompt is tokenized at admission (to check
    /// its length) and again by the pipeline's first node, which then finds it here.
    recent: Mutex<VecDeque<(String, Vec<i64>)>>,
    hits: AtomicU64,
}

/// Prompts [`ChatTokenizer::recent`] keeps (admission runs ahead of the pipeline by at most the
/// queue, and a miss only costs a tokenization), and the longest it keeps: 64 × 64 KiB of text
/// at most, whatever clients send.
const RECENT: usize = 64;
const RECENT_MAX_BYTES: usize = 64 << 10;

#[derive(Deserialize, Default)]
struct TokenizerConfig {
    chat_template: Option<serde_json::Value>,
    bos_token: Option<serde_json::Value>,
    eos_token: Option<serde_json::Value>,
    pad_token: Option<serde_json::Value>,
    padding_side: Option<String>,
}

/// A special token as tokenizer_config.json writes it: a string, or `{"content": ...}`.
fn token_text(v: Option<serde_json::Value>) -> Option<String> {
    match v? {
        serde_json::Value::String(s) => Some(s),
        serde_json::Value::Object(o) => o.get("content").and_then(|c| c.as_str()).map(String::from),
        _ => None,
    }
}

/// Template instructions one rendering may run: a template from a model folder is untrusted
/// input, and a loop over a huge range must end in an error, not hang the server.
const TEMPLATE_FUEL: u64 = 2_000_000;

/// `template` (Jinja, as transformers renders chat templates: blocks trimmed, `raise_exception`)
/// applied to `messages`.
pub fn render_template(
    template: &str,
    messages: &[Message],
    add_generation_prompt: bool,
    bos_token: &str,
    eos_token: &str,
) -> Result<String> {
    render_template_with(template, messages, add_generation_prompt, bos_token, eos_token, &serde_json::Value::Null)
}

/// [`render_template`] with more variables (`extra`, a JSON object: `{"enable_thinking": false}`
/// as `apply_chat_template`'s keyword arguments pass them).
pub fn render_template_with(
    template: &str,
    messages: &[Message],
    add_generation_prompt: bool,
    bos_token: &str,
    eos_token: &str,
    extra: &serde_json::Value,
) -> Result<String> {
    let mut env = minijinja::Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_fuel(Some(TEMPLATE_FUEL));
    env.add_function("raise_exception", |msg: String| -> Result<String, minijinja::Error> {
        Err(minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, msg))
    });
    env.add_template("chat", template).map_err(|e| anyhow!("the chat template does not parse: {e}"))?;
    let ctx = minijinja::context! {
        messages => messages,
        add_generation_prompt => add_generation_prompt,
        bos_token => bos_token,
        eos_token => eos_token,
        ..minijinja::Value::from_serialize(extra)
    };
    let tmpl = env.get_template("chat").expect("added above");
    tmpl.render(ctx).map_err(|e| anyhow!("messages: {}", e.detail().map(String::from).unwrap_or_else(|| e.to_string())))
}

/// An OpenAI chat request's `messages`: each an object with a string `role` and a `content`
/// that is a string or a list of parts of which the text ones are joined. Errors name the
/// message by index.
pub fn parse_messages(messages: &serde_json::Value) -> Result<Vec<Message>> {
    let list = messages.as_array().ok_or_else(|| anyhow!("messages: must be a list"))?;
    ensure!(!list.is_empty(), "messages: at least one message");
    list.iter()
        .enumerate()
        .map(|(i, m)| {
            let role = m
                .get("role")
                .and_then(|r| r.as_str())
                .ok_or_else(|| anyhow!("messages[{i}].role: a string is required"))?;
            let content = match m.get("content") {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(serde_json::Value::Array(parts)) => {
                    let mut text = String::new();
                    for (j, p) in parts.iter().enumerate() {
                        match (p.get("type").and_then(|t| t.as_str()), p.get("text").and_then(|t| t.as_str())) {
                            (Some("text"), Some(t)) => text.push_str(t),
                            _ => bail!(
                                "messages[{i}].content[{j}]: only text parts ({{\"type\": \"text\", \"text\": ...}})"
                            ),
                        }
                    }
                    text
                }
                Some(serde_json::Value::Null) | None => String::new(),
                Some(_) => bail!("messages[{i}].content: a string or a list of text parts"),
            };
            Ok(Message { role: role.to_string(), content })
        })
        .collect()
}

impl ChatTokenizer {
    /// Reads `tokenizer.json` and the chat template (`chat_template.jinja` or
    /// `tokenizer_config.json`'s) from `dir`.
    pub fn load(dir: &Path) -> Result<Self> {
        let path = dir.join("tokenizer.json");
        let tokenizer = tokenizers::Tokenizer::from_file(&path).map_err(|e| anyhow!("{}: {e}", path.display()))?;
        let cfg_path = dir.join("tokenizer_config.json");
        let cfg: TokenizerConfig = match std::fs::read_to_string(&cfg_path) {
            Ok(text) => serde_json::from_str(&text).with_context(|| format!("{}", cfg_path.display()))?,
            Err(_) => TokenizerConfig::default(),
        };
        let jinja = dir.join("chat_template.jinja");
        let template = match std::fs::read_to_string(&jinja) {
            Ok(t) => Some(t),
            Err(_) => match cfg.chat_template {
                Some(serde_json::Value::String(t)) => Some(t),
                // A list of named templates: the one named `default`.
                Some(serde_json::Value::Array(list)) => list
                    .iter()
                    .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
                    .and_then(|t| t.get("template").and_then(|t| t.as_str()).map(String::from)),
                _ => None,
            },
        };
        Ok(Self {
            tokenizer,
            template,
            bos_token: token_text(cfg.bos_token),
            eos_token: token_text(cfg.eos_token),
            pad_token: token_text(cfg.pad_token),
            padding_side: cfg.padding_side,
            recent: Mutex::new(VecDeque::new()),
            hits: AtomicU64::new(0),
        })
    }

    /// The chat template's Jinja source, if the folder has one.
    pub fn template(&self) -> Option<&str> {
        self.template.as_deref()
    }

    /// Whether the folder has a chat template.
    pub fn has_template(&self) -> bool {
        self.template.is_some()
    }

    /// The template applied to `messages`; invalid messages are errors naming the message.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        self.render_with(messages, add_generation_prompt, &serde_json::Value::Null)
    }

    /// [`Self::render`] with template variables `extra` (see [`render_template_with`]).
    pub fn render_with(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
        extra: &serde_json::Value,
    ) -> Result<String> {
        let Some(template) = &self.template else {
            bail!("this model folder has no chat template (chat_template.jinja or tokenizer_config.json)");
        };
        let bos = self.bos_token.as_deref().unwrap_or_default();
        let eos = self.eos_token.as_deref().unwrap_or_default();
        render_template_with(template, messages, add_generation_prompt, bos, eos, extra)
    }

    /// The folder's padding token, if tokenizer_config.json names one.
    pub fn pad_token(&self) -> Option<&str> {
        self.pad_token.as_deref()
    }

    /// The side prompts are padded on (`right` unless tokenizer_config.json says otherwise).
    pub fn padding_side(&self) -> &str {
        self.padding_side.as_deref().unwrap_or("right")
    }

    /// Token ids of `text`; special tokens written in it (`<|im_start|>`) are recognised, no
    /// others added.
    pub fn encode(&self, text: &str) -> Result<Vec<i64>> {
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, ids)) = recent.iter().find(|(t, _)| t == text) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(ids.clone());
        }
        drop(recent);
        let enc = self.tokenizer.encode(text, false).map_err(|e| anyhow!("tokenizing: {e}"))?;
        let ids: Vec<i64> = enc.get_ids().iter().map(|&i| i as i64).collect();
        if text.len() <= RECENT_MAX_BYTES {
            recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
            if recent.len() == RECENT {
                recent.pop_front();
            }
            recent.push_back((text.to_string(), ids.clone()));
        }
        Ok(ids)
    }

    /// Encodings answered from the recent prompts.
    pub fn encode_hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    /// The text of `ids`, special tokens left out.
    pub fn decode(&self, ids: &[i64]) -> Result<String> {
        let ids: Vec<u32> = ids.iter().map(|&i| i as u32).collect();
        self.tokenizer.decode(&ids, true).map_err(|e| anyhow!("detokenizing: {e}"))
    }

    /// The id of a token written as text (an EOS such as `<|im_end|>`).
    pub fn token_id(&self, token: &str) -> Option<i64> {
        self.tokenizer.token_to_id(token).map(i64::from)
    }

    /// The folder's EOS token, if tokenizer_config.json names one.
    pub fn eos_token(&self) -> Option<&str> {
        self.eos_token.as_deref()
    }
}
