//! OpenAI chat and text completions over one of the engine's language models, for every front
//! end that speaks them (`fastvideo serve`'s `/v1/chat/completions` and `/v1/completions`, the
//! Dynamo worker's Chat model): the request checked and turned into one `text` request (its
//! prompt through the model's chat template), the engine's tokens followed into text with stop
//! strings applied, and the OpenAI JSON shapes of the answer.

use serde::Deserialize;
use serde_json::{json, Value};

use fastvideo_request::chat::{ChatCodec, IncrementalText, StopText};
use fastvideo_request::{InputPart, OmniEvent, OmniRequest, RequestError, TaskType, TextRole};

use crate::{Engine, EngineError, Handle};

/// Fields of both routes (`messages` for chat, `prompt` for completions). Unknown fields are an
/// error naming them; OpenAI's that change nothing at their defaults are taken, others refused.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatParams {
    /// The model to answer; must be the served language model's id when given.
    pub model: Option<String>,
    /// Chat only: OpenAI's message list, rendered through the model's chat template.
    pub messages: Option<Value>,
    /// Completions only: one string, or a list holding one string.
    pub prompt: Option<Value>,
    /// Most new tokens (default 256); `max_completion_tokens` wins when both are given.
    pub max_tokens: Option<u32>,
    /// OpenAI's newer name for `max_tokens`.
    pub max_completion_tokens: Option<u32>,
    /// Sampling temperature, as OpenAI's.
    pub temperature: Option<f64>,
    /// Nucleus sampling: only the most likely tokens whose probabilities add up to this.
    pub top_p: Option<f64>,
    /// Ours: only the `top_k` most likely tokens.
    pub top_k: Option<usize>,
    /// Ours: transformers' repetition penalty.
    pub repetition_penalty: Option<f64>,
    /// Seed of the sampler (default 0), so a request repeats.
    pub seed: Option<u64>,
    /// A string or up to 4 strings that end the completion; the answer stops before them.
    pub stop: Option<Value>,
    /// Stream the answer as server-sent events.
    pub stream: Option<bool>,
    /// `include_usage` streams a last event with the token counts; other keys are ignored.
    pub stream_options: Option<Value>,
    /// Choices per request: only 1.
    pub n: Option<u32>,
    /// Only 0 is taken (`repetition_penalty` is ours).
    pub frequency_penalty: Option<f64>,
    /// Only 0 is taken (`repetition_penalty` is ours).
    pub presence_penalty: Option<f64>,
    /// Not supported: only `false` is taken.
    pub logprobs: Option<bool>,
    /// The engine's scheduling priority (default 0), as for other requests.
    pub priority: Option<i32>,
    /// OpenAI's end-user id: accepted and ignored.
    pub user: Option<String>,
}

/// Which route: the wire shapes differ, the work does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChatRoute {
    /// `/v1/chat/completions`: messages in, an assistant message out.
    Chat,
    /// `/v1/completions`: a prompt in, its continuation out.
    Completions,
}

impl ChatRoute {
    /// The `object` of a whole answer.
    pub fn object(self) -> &'static str {
        match self {
            ChatRoute::Chat => "chat.completion",
            ChatRoute::Completions => "text_completion",
        }
    }
}

/// A served language model as the chat routes see it.
pub struct ChatModel<'a> {
    /// Its engine model id (what `model` must name).
    pub id: &'a str,
    /// Its chat template and tokenizer.
    pub codec: &'a dyn ChatCodec,
    /// Positions it takes, prompt and output together.
    pub context: usize,
}

/// The checked request: the engine's, and what the answer needs.
pub struct PreparedChat {
    /// The `text` request to submit.
    pub request: OmniRequest,
    /// Tokens of the prompt (`usage.prompt_tokens`).
    pub prompt_tokens: usize,
    /// Most new tokens the request may generate.
    pub max_tokens: u32,
    /// The stop strings, applied to the text as it streams.
    pub stop: StopText,
    /// Whether the answer streams.
    pub stream: bool,
    /// Whether a streamed answer ends with a usage event.
    pub include_usage: bool,
}

fn field(name: &str, rule: impl Into<String>) -> RequestError {
    RequestError::new(name, rule.into())
}

impl ChatParams {
    /// Checks the fields (errors name them) and builds the engine request `id` for `lm`.
    pub fn prepare(self, route: ChatRoute, lm: &ChatModel, id: String) -> Result<PreparedChat, RequestError> {
        let p = self;
        if let Some(m) = p.model.as_deref().filter(|m| *m != lm.id) {
            return Err(field("model", format!("`{m}` is not the language model served here (`{}`)", lm.id)));
        }
        if p.n.is_some_and(|n| n != 1) {
            return Err(field("n", "only 1 choice per request"));
        }
        for (name, v) in [("frequency_penalty", p.frequency_penalty), ("presence_penalty", p.presence_penalty)] {
            if v.is_some_and(|v| v != 0.0) {
                return Err(field(name, "not supported; use repetition_penalty"));
            }
        }
        if p.logprobs == Some(true) {
            return Err(field("logprobs", "not supported"));
        }
        let prompt = match (route, &p.messages, &p.prompt) {
            (ChatRoute::Chat, Some(m), _) => {
                fastvideo_request::chat::check_roles(m, lm.codec)?;
                lm.codec.prompt(m)?
            }
            (ChatRoute::Chat, None, _) => return Err(field("messages", "required")),
            (ChatRoute::Completions, _, Some(Value::String(t))) => t.clone(),
            (ChatRoute::Completions, _, Some(Value::Array(a))) if a.len() == 1 && a[0].is_string() => {
                a[0].as_str().unwrap_or_default().to_string()
            }
            (ChatRoute::Completions, _, Some(_)) => return Err(field("prompt", "one string")),
            (ChatRoute::Completions, _, None) => return Err(field("prompt", "required")),
        };
        let prompt_tokens = lm.codec.count(&prompt)?;
        if prompt_tokens == 0 {
            return Err(field(if route == ChatRoute::Chat { "messages" } else { "prompt" }, "has no tokens"));
        }
        let max_tokens = p.max_completion_tokens.or(p.max_tokens).unwrap_or(256);
        let name = if p.max_completion_tokens.is_some() { "max_completion_tokens" } else { "max_tokens" };
        if max_tokens == 0 {
            return Err(field(name, "at least 1"));
        }
        if prompt_tokens + max_tokens as usize > lm.context {
            return Err(field(
                name,
                format!(
                    "the prompt's {prompt_tokens} tokens and {max_tokens} more exceed the model's {} positions",
                    lm.context
                ),
            ));
        }
        let stop: Vec<String> = match p.stop {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(t)) => vec![t],
            Some(Value::Array(a)) if a.len() <= 4 && a.iter().all(Value::is_string) => {
                a.iter().filter_map(|v| v.as_str().map(String::from)).collect()
            }
            Some(_) => return Err(field("stop", "a string or a list of at most 4 strings")),
        };
        let stop = StopText::new(stop)?;
        let mut decode = json!({"max_tokens": max_tokens, "seed": p.seed.unwrap_or(0)});
        for (k, v) in [
            ("temperature", p.temperature.map(Value::from)),
            ("top_p", p.top_p.map(Value::from)),
            ("top_k", p.top_k.map(Value::from)),
            ("repetition_penalty", p.repetition_penalty.map(Value::from)),
        ] {
            if let Some(v) = v {
                decode[k] = v;
            }
        }
        let include_usage = p.stream_options.as_ref().and_then(|o| o.get("include_usage")).and_then(Value::as_bool);
        let mut request = OmniRequest::text_to_video(id, "");
        request.task = TaskType::Text;
        request.inputs = vec![InputPart::Text { text: prompt, role: TextRole::Prompt }];
        // Units of work: the prompt's prefill chunks and one per token (for the cost model).
        request.diffusion.num_inference_steps = Some(prompt_tokens.div_ceil(512) as u32 + max_tokens);
        request.node_params.insert("ar_decode".into(), decode);
        request.priority = p.priority.unwrap_or(0);
        request.model = Some(lm.id.to_string());
        Ok(PreparedChat {
            request,
            prompt_tokens,
            max_tokens,
            stop,
            stream: p.stream.unwrap_or(false),
            include_usage: include_usage.unwrap_or(false),
        })
    }
}

/// Follows a submitted chat to its end, calling `on_text` with each new visible part (it returns
/// false when nobody listens any more: the generation is cancelled); returns the completion
/// tokens and OpenAI's `finish_reason`. A stop string cancels the rest of the generation.
pub async fn follow_chat(
    engine: &Engine,
    codec: &dyn ChatCodec,
    mut handle: Handle,
    stop: &mut StopText,
    max_tokens: u32,
    mut on_text: impl FnMut(String) -> bool,
) -> Result<(usize, &'static str), EngineError> {
    let mut text = IncrementalText::default();
    let mut error = None;
    while let Some(ev) = handle.events.recv().await {
        match ev {
            OmniEvent::Token { token, .. } => {
                let new = stop.update(text.push(codec, token));
                if (!new.is_empty() && !on_text(new)) || stop.stopped() {
                    engine.cancel(&handle.request_id);
                    break;
                }
            }
            OmniEvent::Error { code, message, .. } => error = Some((code, message)),
            _ => {}
        }
    }
    let ended = handle.output.await;
    if !stop.stopped() {
        if let Some((code, message)) = error.filter(|_| !matches!(ended, Ok(Ok(_)))) {
            return Err(EngineError::Failed { code, message });
        }
        let rest = stop.finish(&text.finish(codec));
        if !rest.is_empty() {
            on_text(rest);
        }
    }
    let n = text.tokens().len();
    let reason = if !stop.stopped() && n >= max_tokens as usize { "length" } else { "stop" };
    Ok((n, reason))
}

/// OpenAI's `usage` object.
pub fn usage(prompt: usize, completion: usize) -> Value {
    json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})
}

/// The whole answer (not streamed).
pub fn answer(
    route: ChatRoute,
    id: &str,
    created: u64,
    model: &str,
    text: String,
    reason: &str,
    usage: Value,
) -> Value {
    let choice = match route {
        ChatRoute::Chat => {
            json!({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": reason})
        }
        ChatRoute::Completions => json!({"index": 0, "text": text, "logprobs": null, "finish_reason": reason}),
    };
    json!({"id": id, "object": route.object(), "created": created, "model": model, "choices": [choice], "usage": usage})
}

/// One streamed chunk: `delta` (`{"role"}`, `{"content"}` or `{}`) and the finish reason on the
/// last.
pub fn chunk(route: ChatRoute, id: &str, created: u64, model: &str, delta: Value, reason: Option<&str>) -> Value {
    let (choice, object) = match route {
        ChatRoute::Chat => (json!({"index": 0, "delta": delta, "finish_reason": reason}), "chat.completion.chunk"),
        ChatRoute::Completions => {
            let text = delta.get("content").cloned().unwrap_or(json!(""));
            (json!({"index": 0, "text": text, "logprobs": null, "finish_reason": reason}), "text_completion")
        }
    };
    json!({"id": id, "object": object, "created": created, "model": model, "choices": [choice]})
}

/// The chunk after the last that carries only `usage` (OpenAI's `stream_options.include_usage`).
pub fn usage_chunk(route: ChatRoute, id: &str, created: u64, model: &str, usage: Value) -> Value {
    let mut last = chunk(route, id, created, model, json!({}), None);
    last["choices"] = json!([]);
    last["usage"] = usage;
    last
}
