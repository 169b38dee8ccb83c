//! World-model sessions over HTTP (docs/api.md, "Sessions"): open, inspect, act, close, and a
//! WebSocket that carries the frames as they are generated and takes actions back.
//!
//! Stream messages, server to client: first a JSON `{"type": "hello", "width", "height", "fps",
//! "actions"}`, then one binary message per video frame — a 16-byte header (presentation time
//! in milliseconds, then the id of the last action applied, both u64 little-endian) followed by
//! `height × width × 3` RGB bytes — and a JSON `{"type": "closed", "reason"}` when the session
//! ends, after any `{"type": "event", "plugin", "name", "payload"}` messages of the session's
//! plugins (observers report per session, as for jobs). Client to server: JSON `{"type": "action", "action": "up", "id": 7}`, `{"type": "flush"}`
//! (drop the chunks made but not yet sent; answered `{"type": "flushed", "chunks"}`),
//! `{"type": "ping", "t"}` (answered `pong`) or `{"type": "close"}`. A client that goes away closes its session, returning its slabs.

use std::collections::BTreeMap;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Request, State};
use axum::response::Response;
use axum::{Extension, Json};
use fastvideo_engine::session::{SessionEvent, SessionRequest};
use fastvideo_request::{ActionPart, OmniEvent};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::params::read_body;
use crate::state::AppState;

/// A session opened with another API key is, for this caller, not there.
pub(crate) fn check_owner(s: &AppState, id: &str, who: Caller) -> Result<(), ApiError> {
    match s.sessions.owners.lock().unwrap().get(id) {
        Some(owner) if *owner != who => Err(ApiError::NotFound { what: format!("session `{id}`") }),
        _ => Ok(()),
    }
}

/// The caller recorded by the auth layer (none on a server without keys).
pub(crate) fn caller(req: &Request) -> Caller {
    req.extensions().get::<Caller>().copied().unwrap_or_default()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateSession {
    model: Option<String>,
    prompt: Option<String>,
    start_seed: Option<u64>,
    seed: Option<u64>,
    window: Option<usize>,
    /// As a job's: plugins that alter the sampled distribution are not called.
    exact: Option<bool>,
    /// As a job's: per-session parameters of the deploy's plugins, by plugin name.
    plugin_params: Option<BTreeMap<String, Value>>,
    /// As a job's: LoRA adapters (the deploy's `[[adapters]]` with `world = true`).
    lora: Option<Value>,
}

fn session_object(s: &AppState, id: &str) -> Result<Value, ApiError> {
    let model = s.engine.session_model().ok_or_else(|| ApiError::from(fastvideo_engine::EngineError::NoSessions))?;
    let info = s.engine.session_info(id).ok_or_else(|| ApiError::NotFound { what: format!("session `{id}`") })?;
    Ok(json!({
        "id": id, "object": "session", "model": model.id(), "status": "live",
        "fps": model.fps(), "frames_per_chunk": model.frames_per_chunk(), "actions": model.actions(),
        "width": model.frame_size().0, "height": model.frame_size().1,
        "chunks": info.chunks, "frames": info.frames, "last_action_id": info.last_action_id,
        "late_chunks": info.late_chunks, "stream": format!("/v1/sessions/{id}/stream"),
        "webrtc": format!("/v1/sessions/{id}/webrtc"),
    }))
}

/// `POST /v1/sessions`.
pub async fn create_session(State(s): State<AppState>, req: Request) -> Result<Json<Value>, ApiError> {
    let who = caller(&req);
    let p: CreateSession = read_body(req).await?;
    let model = s.engine.session_model().ok_or_else(|| ApiError::from(fastvideo_engine::EngineError::NoSessions))?;
    if let Some(m) = &p.model {
        if m != model.id() {
            return Err(ApiError::field(
                "model",
                format!("model `{m}` is not served here; sessions run `{}`", model.id()),
            ));
        }
    }
    let id = s.new_id("session");
    let req = SessionRequest {
        prompt: p.prompt,
        start_seed: p.start_seed,
        seed: p.seed.unwrap_or(0),
        window: p.window,
        exact: p.exact.unwrap_or(false),
        plugin_params: p.plugin_params.unwrap_or_default(),
        lora: match &p.lora {
            Some(v) => crate::params::lora_choices(v)?,
            None => Vec::new(),
        },
    };
    let rx = s.engine.open_session(id.clone(), req).await?;
    s.sessions.untaken.lock().unwrap().insert(id.clone(), rx);
    {
        // Owners of sessions that ended (expired, closed by their client) are dropped here.
        let mut owners = s.sessions.owners.lock().unwrap();
        owners.retain(|id, _| s.engine.session_info(id).is_some());
        owners.insert(id.clone(), who);
    }
    Ok(Json(session_object(&s, &id)?))
}

/// `GET /v1/sessions/{id}`.
pub async fn get_session(
    State(s): State<AppState>,
    Extension(who): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    check_owner(&s, &id, who)?;
    Ok(Json(session_object(&s, &id)?))
}

/// `POST /v1/sessions/{id}/actions`: an `ActionPart` (`key` or `action`, `delta`, `from_frame`,
/// `id`); applies from `from_frame`, else to the first chunk not yet committed.
pub async fn post_action(
    State(s): State<AppState>,
    Path(id): Path<String>,
    req: Request,
) -> Result<Json<Value>, ApiError> {
    check_owner(&s, &id, caller(&req))?;
    let p: ActionPart = read_body(req).await?;
    s.engine.session_action(&id, &p)?;
    Ok(Json(json!({"session": id, "action": p, "status": "queued"})))
}

/// `DELETE /v1/sessions/{id}`.
pub async fn delete_session(
    State(s): State<AppState>,
    Extension(who): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    check_owner(&s, &id, who)?;
    s.sessions.untaken.lock().unwrap().remove(&id);
    s.sessions.owners.lock().unwrap().remove(&id);
    if !s.engine.close_session(&id, "closed by the client") {
        return Err(ApiError::NotFound { what: format!("session `{id}`") });
    }
    Ok(Json(json!({"id": id, "object": "session.deleted", "deleted": true})))
}

/// A message from a session's client, on the WebSocket or the WebRTC data channel.
#[derive(Debug, PartialEq)]
pub(crate) enum ClientMessage {
    /// `{"type": "action", "key": "up", "id": 7, "t": 1234.5}`; `t` is the client's clock,
    /// echoed in the acknowledgement.
    Action { action: ActionPart, t: Option<f64> },
    /// `{"type": "flush"}`: drop what was made but not yet sent.
    Flush,
    /// `{"type": "close"}`.
    Close,
    /// `{"type": "ping", "t": …}`, answered `{"type": "pong", "t": …}` (round-trip time).
    Ping { t: Option<f64> },
}

impl ClientMessage {
    /// Parses one message; the error is what the client is told.
    pub(crate) fn parse(bytes: &[u8]) -> Result<Self, String> {
        let v: Value = serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))?;
        let Value::Object(mut m) = v else { return Err("expected a JSON object".into()) };
        let t = m.remove("t").and_then(|t| t.as_f64());
        match m.remove("type").as_ref().and_then(Value::as_str) {
            Some("action") => serde_json::from_value::<ActionPart>(Value::Object(m))
                .map(|action| ClientMessage::Action { action, t })
                .map_err(|e| format!("action: {e}")),
            Some("flush") => Ok(ClientMessage::Flush),
            Some("close") => Ok(ClientMessage::Close),
            Some("ping") => Ok(ClientMessage::Ping { t }),
            _ => Err("type: expected \"action\", \"flush\", \"close\" or \"ping\"".into()),
        }
    }
}

/// Drops the chunks waiting on a session's stream; returns how many, and the other events
/// that were waiting among them (plugin events, the end), in order, for the caller to send.
pub(crate) fn drain_chunks(rx: &mut mpsc::Receiver<SessionEvent>) -> (usize, Vec<SessionEvent>) {
    let (mut dropped, mut kept) = (0, Vec::new());
    while let Ok(e) = rx.try_recv() {
        match e {
            SessionEvent::Chunk(_) => dropped += 1,
            other => kept.push(other),
        }
    }
    (dropped, kept)
}

/// A session's plugin event as a stream message: `{"type": "event", "plugin", "name", "payload"}`.
pub(crate) fn plugin_message(e: &OmniEvent) -> Option<String> {
    match e {
        OmniEvent::Plugin { plugin, name, payload, .. } => {
            Some(json!({"type": "event", "plugin": plugin, "name": name, "payload": payload}).to_string())
        }
        _ => None,
    }
}

/// Takes a session's stream for one client (WebSocket or WebRTC); errors for an unknown session
/// or one already streamed.
pub(crate) fn take_stream(s: &AppState, id: &str) -> Result<mpsc::Receiver<SessionEvent>, ApiError> {
    if s.engine.session_info(id).is_none() {
        return Err(ApiError::NotFound { what: format!("session `{id}`") });
    }
    s.sessions.untaken.lock().unwrap().remove(id).ok_or_else(|| ApiError::Conflict {
        code: "already_streaming".into(),
        message: format!("session `{id}` is already streamed by another client"),
    })
}

/// `GET /v1/sessions/{id}/stream` (WebSocket).
pub async fn session_stream(
    State(s): State<AppState>,
    Extension(who): Extension<Caller>,
    Path(id): Path<String>,
    ws: WebSocketUpgrade,
) -> Result<Response, ApiError> {
    check_owner(&s, &id, who)?;
    let rx = take_stream(&s, &id)?;
    Ok(ws.on_upgrade(move |socket| stream(s, id, rx, socket)))
}

async fn stream(s: AppState, id: String, mut rx: mpsc::Receiver<SessionEvent>, mut socket: WebSocket) {
    let Some(model) = s.engine.session_model().cloned() else { return };
    s.engine.session_streaming(&id, true);
    let fps = model.fps().max(1) as u64;
    let (width, height) = model.frame_size();
    let hello = json!({"type": "hello", "session": id, "fps": fps, "width": width, "height": height, "actions": model.actions()});
    if socket.send(Message::Text(hello.to_string().into())).await.is_err() {
        s.engine.close_session(&id, "the client went away");
        return;
    }
    let reason = loop {
        tokio::select! {
            ev = rx.recv() => match ev {
                Some(SessionEvent::Chunk(c)) => {
                    let frame_bytes = (c.video.height * c.video.width * 3) as usize;
                    let mut gone = false;
                    for (i, rgb) in c.video.rgb.chunks(frame_bytes).enumerate() {
                        let pts_ms = (c.first_frame + i as u64) * 1000 / fps;
                        let mut msg = Vec::with_capacity(16 + rgb.len());
                        msg.extend_from_slice(&pts_ms.to_le_bytes());
                        msg.extend_from_slice(&c.action_id.to_le_bytes());
                        msg.extend_from_slice(rgb);
                        if socket.send(Message::Binary(msg.into())).await.is_err() {
                            gone = true;
                            break;
                        }
                    }
                    if gone {
                        break None;
                    }
                }
                Some(SessionEvent::Plugin(e)) => {
                    if let Some(m) = plugin_message(&e) {
                        if socket.send(Message::Text(m.into())).await.is_err() {
                            break None;
                        }
                    }
                }
                Some(SessionEvent::Closed { reason }) => break Some(reason),
                None => break Some("closed".to_string()),
            },
            msg = socket.recv() => match msg {
                Some(Ok(Message::Text(t))) => {
                    let reply = match ClientMessage::parse(t.as_bytes()) {
                        Ok(ClientMessage::Action { action, t }) => match s.engine.session_action(&id, &action) {
                            // Acknowledged as on the data channel, so a client measures the same way on both.
                            Ok(()) => {
                                let m = json!({"type": "ack", "id": action.id, "t": t});
                                if socket.send(Message::Text(m.to_string().into())).await.is_err() {
                                    break None;
                                }
                                None
                            }
                            Err(e) => Some(e.to_string()),
                        },
                        Ok(ClientMessage::Flush) => {
                            // Drop the chunks made but not yet sent (the reader was behind).
                            let (dropped, kept) = drain_chunks(&mut rx);
                            let mut msgs = vec![json!({"type": "flushed", "chunks": dropped}).to_string()];
                            let mut closed = None;
                            for e in kept {
                                match e {
                                    SessionEvent::Plugin(e) => msgs.extend(plugin_message(&e)),
                                    SessionEvent::Closed { reason } => closed = Some(reason),
                                    SessionEvent::Chunk(_) => {}
                                }
                            }
                            let mut gone = false;
                            for m in msgs {
                                gone = gone || socket.send(Message::Text(m.into())).await.is_err();
                            }
                            if gone {
                                break None;
                            }
                            if let Some(reason) = closed {
                                break Some(reason);
                            }
                            None
                        }
                        Ok(ClientMessage::Close) => {
                            s.engine.close_session(&id, "closed by the client");
                            None
                        }
                        Ok(ClientMessage::Ping { t }) => {
                            let m = json!({"type": "pong", "t": t});
                            if socket.send(Message::Text(m.to_string().into())).await.is_err() {
                                break None;
                            }
                            None
                        }
                        Err(e) => Some(e),
                    };
                    if let Some(err) = reply {
                        let m = json!({"type": "error", "message": err});
                        if socket.send(Message::Text(m.to_string().into())).await.is_err() {
                            break None;
                        }
                    }
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break None,
                Some(Ok(_)) => {}
            },
        }
    };
    match reason {
        Some(reason) => {
            let m = json!({"type": "closed", "reason": reason});
            let _ = socket.send(Message::Text(m.to_string().into())).await;
            let _ = socket.send(Message::Close(None)).await;
        }
        // The client went away: free the session's slabs now rather than at its next chunk.
        None => {
            s.engine.close_session(&id, "the client went away");
        }
    }
}
