//! OpenAI's `/v1/chat/completions` and `/v1/completions` over the engine's language model: the
//! request checked and built by `fastvideo_engine::chat` (shared with the Dynamo worker), one
//! `text` request on the same engine and scheduler as the video jobs (its decode steps batch
//! with other chats' and interleave with denoise steps), tokens streamed back as SSE chunks or
//! gathered into one answer with `usage`.

use std::convert::Infallible;

use axum::extract::{Request, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use fastvideo_engine::chat::{self as chat_api, ChatParams, ChatRoute};
use serde_json::{json, Value};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::job::now_secs;
use crate::params::read_body;
use crate::state::AppState;

async fn complete(s: AppState, who: Caller, req: Request, route: ChatRoute) -> Result<Response, ApiError> {
    let lm = s.chat.clone().ok_or_else(|| ApiError::NotFound {
        what: "language model: this server serves none (start it with --lm DIR)".into(),
    })?;
    let p: ChatParams = read_body(req).await?;
    s.keys.check_priority(who, p.priority)?;
    let context = s.engine.limits_of(&lm.id).map_or(u32::MAX, |l| l.max_steps) as usize;
    let model = chat_api::ChatModel { id: &lm.id, codec: lm.codec.as_ref(), context };
    let id = s.new_id(if route == ChatRoute::Chat { "chatcmpl" } else { "cmpl" });
    let mut prep = p.prepare(route, &model, id)?;
    let handle = s.engine.submit(prep.request.clone())?;
    let (id, created, model) = (handle.request_id.clone(), now_secs(), lm.id.clone());
    if !prep.stream {
        let mut text = String::new();
        let (n, reason) =
            chat_api::follow_chat(&s.engine, lm.codec.as_ref(), handle, &mut prep.stop, prep.max_tokens, |t| {
                text.push_str(&t);
                true
            })
            .await
            .map_err(ApiError::from)?;
        let usage = chat_api::usage(prep.prompt_tokens, n);
        return Ok(Json(chat_api::answer(route, &id, created, &model, text, reason, usage)).into_response());
    }
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Event>();
    let send = move |tx: &tokio::sync::mpsc::UnboundedSender<Event>, v: Value| {
        tx.send(Event::default().data(v.to_string())).is_ok()
    };
    tokio::spawn(async move {
        let chunk = |delta: Value, reason: Option<&str>| chat_api::chunk(route, &id, created, &model, delta, reason);
        if route == ChatRoute::Chat && !send(&tx, chunk(json!({"role": "assistant", "content": ""}), None)) {
            s.engine.cancel(&handle.request_id);
            return;
        }
        let out = chat_api::follow_chat(&s.engine, lm.codec.as_ref(), handle, &mut prep.stop, prep.max_tokens, |t| {
            send(&tx, chunk(json!({"content": t}), None))
        })
        .await;
        match out {
            Ok((n, reason)) => {
                send(&tx, chunk(json!({}), Some(reason)));
                if prep.include_usage {
                    let usage = chat_api::usage(prep.prompt_tokens, n);
                    send(&tx, chat_api::usage_chunk(route, &id, created, &model, usage));
                }
            }
            Err(e) => {
                send(&tx, ApiError::from(e).body());
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
    complete(s, who, req, ChatRoute::Chat).await
}

pub async fn completions(
    State(s): State<AppState>,
    Extension(who): Extension<Caller>,
    req: Request,
) -> Result<Response, ApiError> {
    complete(s, who, req, ChatRoute::Completions).await
}
