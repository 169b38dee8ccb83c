//! Event streams: SSE per video job, and a WebSocket that submits jobs and streams their events
//! and finished MP4s.

use std::convert::Infallible;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::Response;
use axum::Extension;
use fastvideo_request::OmniEvent;
use futures_util::stream::{self, Stream, StreamExt};
use serde::Deserialize;
use tokio::sync::{broadcast, mpsc};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::params::CreateParams;
use crate::state::AppState;

fn kind(ev: &OmniEvent) -> &'static str {
    match ev {
        OmniEvent::NodeStarted { .. } => "node_started",
        OmniEvent::Progress { .. } => "progress",
        OmniEvent::Preview { .. } => "preview",
        OmniEvent::Plugin { .. } => "plugin",
        OmniEvent::Artifact { .. } => "artifact",
        OmniEvent::Reward { .. } => "reward",
        OmniEvent::Error { .. } => "error",
        OmniEvent::Chunk { .. } => "chunk",
        OmniEvent::Token { .. } => "token",
        OmniEvent::Done { .. } => "done",
    }
}

fn is_last(ev: &OmniEvent) -> bool {
    matches!(ev, OmniEvent::Done { .. } | OmniEvent::Error { .. })
}

/// A job's events: the history, then live ones, ending after `done` or `error`.
fn events(s: &AppState, id: &str, who: Caller) -> Result<impl Stream<Item = OmniEvent> + Send + 'static, ApiError> {
    let (history, rx) =
        s.jobs.subscribe(id, who).ok_or_else(|| ApiError::NotFound { what: format!("video `{id}`") })?;
    let ended = history.iter().any(is_last);
    let live = stream::unfold(rx.filter(|_| !ended), |rx| async move {
        let mut rx = rx?;
        loop {
            match rx.recv().await {
                Ok(ev) => {
                    let last = is_last(&ev);
                    return Some((ev, (!last).then_some(rx)));
                }
                // A slow subscriber skipped events; the next one still comes.
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    });
    // Events published between the history snapshot and the subscription are in both; the
    // history was taken under the same lock as the subscription, so nothing is lost or doubled.
    Ok(stream::iter(history).chain(live))
}

/// `GET /v1/videos/{id}/events`: Server-Sent Events, one `OmniEvent` JSON per event, the event
/// name being its type.
pub async fn video_events(
    State(s): State<AppState>,
    Extension(who): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let st = events(&s, &id, who)?.map(|ev| {
        let data = serde_json::to_string(&ev).unwrap_or_default();
        Ok(Event::default().event(kind(&ev)).data(data))
    });
    Ok(Sse::new(st).keep_alive(KeepAlive::default()))
}

/// What a WebSocket client sends.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
enum ClientMessage {
    /// Submit a video job (the same fields as `POST /v1/videos`).
    Create { params: Box<CreateParams> },
    /// Cancel a job this server knows.
    Cancel { id: String },
}

/// `GET /v1/stream`: submit jobs and receive, for each, `{"type":"created","video":…}`, its
/// events, then `{"type":"content","id":…,"content_type":"video/mp4","bytes":N}` followed by a
/// binary message with the MP4.
pub async fn websocket(State(s): State<AppState>, Extension(who): Extension<Caller>, ws: WebSocketUpgrade) -> Response {
    ws.on_upgrade(move |socket| serve_socket(s, socket, who))
}

async fn serve_socket(s: AppState, socket: WebSocket, who: Caller) {
    let (mut sink, mut source) = socket.split();
    let (tx, mut rx) = mpsc::unbounded_channel::<Message>();
    let writer = tokio::spawn(async move {
        use futures_util::SinkExt;
        while let Some(m) = rx.recv().await {
            if sink.send(m).await.is_err() {
                break;
            }
        }
    });
    let json = |v: serde_json::Value| Message::Text(v.to_string().into());
    while let Some(Ok(msg)) = source.next().await {
        let text = match msg {
            Message::Text(t) => t.to_string(),
            Message::Close(_) => break,
            _ => continue,
        };
        let parsed: Result<ClientMessage, _> = serde_json::from_str(&text);
        let reply = match parsed {
            Err(e) => Err(ApiError::field("message", format!("message: {e}"))),
            Ok(ClientMessage::Cancel { id }) => {
                // Only a job this key can see.
                let cancelled = s.jobs.get(&id, who).is_some() && s.engine.cancel(&id);
                Ok(json(serde_json::json!({"type": "cancel", "id": id, "cancelled": cancelled})))
            }
            Ok(ClientMessage::Create { params }) => crate::videos::create(&s, &params, who).map(|video| {
                let (s2, tx2, id) = (s.clone(), tx.clone(), video.id.clone());
                tokio::spawn(async move { forward(s2, id, tx2, who).await });
                json(serde_json::json!({"type": "created", "video": video}))
            }),
        };
        let m = reply.unwrap_or_else(|e| json(serde_json::json!({"type": "error", "error": e.body()["error"]})));
        if tx.send(m).is_err() {
            break;
        }
    }
    drop(tx);
    let _ = writer.await;
}

/// Streams one job's events to a socket, then its MP4.
async fn forward(s: AppState, id: String, tx: mpsc::UnboundedSender<Message>, who: Caller) {
    let Ok(events) = events(&s, &id, who) else { return };
    let mut events = Box::pin(events);
    let mut completed = false;
    while let Some(ev) = events.next().await {
        completed = matches!(ev, OmniEvent::Done { .. });
        if tx.send(Message::Text(serde_json::to_string(&ev).unwrap_or_default().into())).is_err() {
            return;
        }
    }
    if completed {
        let mp4 = match s.jobs.content(&id, who) {
            Some((_, Some(mp4))) => mp4.bytes().await.ok(),
            _ => None,
        };
        if let Some(mp4) = mp4 {
            let head =
                serde_json::json!({"type": "content", "id": id, "content_type": "video/mp4", "bytes": mp4.len()});
            let _ = tx.send(Message::Text(head.to_string().into()));
            let _ = tx.send(Message::Binary(mp4.into()));
        }
    }
}
