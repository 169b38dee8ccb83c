//! OpenAI's `/v1/chat/completions` and `/v1/completions` over the engine's language model: the
//! messages through the model's chat template, one `text` request on the same engine and
//! scheduler as the video jobs (its decode steps batch with other chats' and interleave with
//! denoise steps), tokens streamed back as SSE chunks or gathered into one answer with `usage`.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use fastvideo_engine::{Engine, Handle};
use fastvideo_request::chat::{ChatCodec, StopText};
use fastvideo_request::{InputPart, OmniEvent, OmniRequest, TaskType, TextRole};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::job::now_secs;
use crate::params::read_body;
use crate::state::AppState;

/// The language model the chat routes serve: its engine model id and chat codec.
pub struct ChatModel {
    pub id: String,
    pub codec: Arc<dyn ChatCodec>,
}

/// Fields of both routes (`messages` for chat, `prompt` for completions). Unknown fields are a
/// 400 naming them; OpenAI's that change nothing at their defaults are taken, others refused.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatParams {
    model: Option<String>,
    messages: Option<Value>,
    prompt: Option<Value>,
    max_tokens: Option<u32>,
    max_completion_tokens: Option<u32>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    /// Ours: only the `top_k` most likely tokens.
    top_k: Option<usize>,
    /// Ours: transformers' repetition penalty.
    repetition_penalty: Option<f64>,
    seed: Option<u64>,
    stop: Option<Value>,
    stream: Option<bool>,
    stream_options: Option<Value>,
    n: Option<u32>,
    frequency_penalty: Option<f64>,
    presence_penalty: Option<f64>,
    logprobs: Option<bool>,
    priority: Option<i32>,
    #[allow(dead_code)]
    user: Option<String>,
}

/// Which route: the wire shapes differ, the work does not.
#[derive(Clone, Copy, PartialEq)]
enum Route {
    Chat,
    Completions,
}

fn field(name: &str, rule: impl Into<String>) -> ApiError {
    ApiError::field(name, format!("{name}: {}", rule.into()))
}

/// The checked request: the engine's, and what the answer needs.
struct Prepared {
    request: OmniRequest,
    prompt_tokens: usize,
    max_tokens: u32,
    stop: StopText,
    stream: bool,
    include_usage: bool,
}

fn prepare(s: &AppState, lm: &ChatModel, p: ChatParams, route: Route, who: Caller) -> Result<Prepared, ApiError> {
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
    s.keys.check_priority(who, p.priority)?;
    let prompt = match (route, &p.messages, &p.prompt) {
        (Route::Chat, Some(m), _) => lm.codec.prompt(m).map_err(ApiError::from)?,
        (Route::Chat, None, _) => return Err(field("messages", "required")),
        (Route::Completions, _, Some(Value::String(t))) => t.clone(),
        (Route::Completions, _, Some(Value::Array(a))) if a.len() == 1 && a[0].is_string() => {
            a[0].as_str().unwrap_or_default().to_string()
        }
        (Route::Completions, _, Some(_)) => return Err(field("prompt", "one string")),
        (Route::Completions, _, None) => return Err(field("prompt", "required")),
    };
    let prompt_tokens = lm.codec.count(&prompt).map_err(ApiError::from)?;
    if prompt_tokens == 0 {
        return Err(field(if route == Route::Chat { "messages" } else { "prompt" }, "has no tokens"));
    }
    let context = s.engine.limits_of(&lm.id).map_or(u32::MAX, |l| l.max_steps) as usize;
    let max_tokens = p.max_completion_tokens.or(p.max_tokens).unwrap_or(256);
    let name = if p.max_completion_tokens.is_some() { "max_completion_tokens" } else { "max_tokens" };
    if max_tokens == 0 {
        return Err(field(name, "at least 1"));
    }
    if prompt_tokens + max_tokens as usize > context {
        return Err(field(
            name,
            format!("the prompt's {prompt_tokens} tokens and {max_tokens} more exceed the model's {context} positions"),
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
    let stop = StopText::new(stop).map_err(ApiError::from)?;
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
    let mut request = OmniRequest::text_to_video(s.new_id(if route == Route::Chat { "chatcmpl" } else { "cmpl" }), "");
    request.task = TaskType::Text;
    request.inputs = vec![InputPart::Text { text: prompt, role: TextRole::Prompt }];
    // Units of work: the prompt's prefill chunks and one per token (for the cost model).
    request.diffusion.num_inference_steps = Some(prompt_tokens.div_ceil(512) as u32 + max_tokens);
    request.node_params.insert("ar_decode".into(), decode);
    request.priority = p.priority.unwrap_or(0);
    request.model = Some(lm.id.clone());
    Ok(Prepared {
        request,
        prompt_tokens,
        max_tokens,
        stop,
        stream: p.stream.unwrap_or(false),
        include_usage: include_usage.unwrap_or(false),
    })
}

/// Follows a submitted chat to its end, calling `on_text` with each new visible part; returns
/// the completion tokens, whether a stop string or the model ended it (else `max_tokens`), and
/// the engine's error if it failed. A stop string cancels the rest of the generation.
async fn follow(
    engine: &Engine,
    codec: &dyn ChatCodec,
    mut handle: Handle,
    stop: &mut StopText,
    max_tokens: u32,
    mut on_text: impl FnMut(String) -> bool,
) -> Result<(usize, &'static str), ApiError> {
    let mut tokens = Vec::new();
    let mut error = None;
    while let Some(ev) = handle.events.recv().await {
        match ev {
            OmniEvent::Token { token, .. } => {
                tokens.push(token);
                let new = stop.update(&codec.decode(&tokens));
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
            return Err(ApiError::Internal { code, message });
        }
        let rest = stop.finish(&codec.decode(&tokens));
        if !rest.is_empty() {
            on_text(rest);
        }
    }
    let reason = if !stop.stopped() && tokens.len() >= max_tokens as usize { "length" } else { "stop" };
    Ok((tokens.len(), reason))
}

fn usage(prompt: usize, completion: usize) -> Value {
    json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})
}

async fn complete(s: AppState, who: Caller, req: Request, route: Route) -> Result<Response, ApiError> {
    let lm = s.chat.clone().ok_or_else(|| ApiError::NotFound {
        what: "language model: this server serves none (start it with --lm DIR)".into(),
    })?;
    let p: ChatParams = read_body(req).await?;
    let mut prep = prepare(&s, &lm, p, route, who)?;
    let handle = s.engine.submit(prep.request.clone())?;
    let (id, created, model) = (handle.request_id.clone(), now_secs(), lm.id.clone());
    let object = if route == Route::Chat { "chat.completion" } else { "text_completion" };
    if !prep.stream {
        let mut text = String::new();
        let (n, reason) = follow(&s.engine, lm.codec.as_ref(), handle, &mut prep.stop, prep.max_tokens, |t| {
            text.push_str(&t);
            true
        })
        .await?;
        let choice = match route {
            Route::Chat => {
                json!({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": reason})
            }
            Route::Completions => json!({"index": 0, "text": text, "logprobs": null, "finish_reason": reason}),
        };
        let body = json!({"id": id, "object": object, "created": created, "model": model, "choices": [choice],
                          "usage": usage(prep.prompt_tokens, n)});
        return Ok(Json(body).into_response());
    }
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Event>();
    let chunk = move |delta: Value, reason: Option<&str>| {
        let choice = match route {
            Route::Chat => json!({"index": 0, "delta": delta, "finish_reason": reason}),
            Route::Completions => {
                json!({"index": 0, "text": delta.get("content").cloned().unwrap_or(json!("")), "logprobs": null, "finish_reason": reason})
            }
        };
        let object = if route == Route::Chat { "chat.completion.chunk" } else { "text_completion" };
        json!({"id": id, "object": object, "created": created, "model": model, "choices": [choice]})
    };
    let send = move |tx: &tokio::sync::mpsc::UnboundedSender<Event>, v: Value| {
        tx.send(Event::default().data(v.to_string())).is_ok()
    };
    tokio::spawn(async move {
        if route == Route::Chat && !send(&tx, chunk(json!({"role": "assistant", "content": ""}), None)) {
            s.engine.cancel(&handle.request_id);
            return;
        }
        let out = follow(&s.engine, lm.codec.as_ref(), handle, &mut prep.stop, prep.max_tokens, |t| {
            send(&tx, chunk(json!({"content": t}), None))
        })
        .await;
        match out {
            Ok((n, reason)) => {
                send(&tx, chunk(json!({}), Some(reason)));
                if prep.include_usage {
                    let mut last = chunk(json!({}), None);
                    last["choices"] = json!([]);
                    last["usage"] = usage(prep.prompt_tokens, n);
                    send(&tx, last);
                }
            }
            Err(e) => {
                send(&tx, e.body());
            }
        }
        let _ = tx.send(Event::default().data("[DONE]"));
    });
    let stream =
        futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|e| (Ok::<_, Infallible>(e), rx)) });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()).into_response())
}

pub async fn chat_completions(
    State(s): State<AppState>,
    Extension(who): Extension<Caller>,
    req: Request,
) -> Result<Response, ApiError> {
    complete(s, who, req, Route::Chat).await
}

pub async fn completions(
    State(s): State<AppState>,
    Extension(who): Extension<Caller>,
    req: Request,
) -> Result<Response, ApiError> {
    complete(s, who, req, Route::Completions).await
}
