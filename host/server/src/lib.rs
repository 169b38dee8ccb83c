//! The HTTP face of the engine (axum): OpenAI-compatible video and image endpoints, SSE and
//! WebSocket event streams, health, readiness, Prometheus metrics and a graceful drain.
//!
//! The server owns no model code: it is handed a started [`Engine`](fastvideo_engine::Engine) and a
//! metrics registry.

#![deny(missing_docs)]

mod auth;
mod causal;
mod chat;
mod comfy;
mod error;
mod files;
mod images;
mod job;
mod jobs;
mod listener;
mod live_streams;
mod params;
mod rollouts;
mod session_streams;
mod sessions;
mod state;
mod store;
mod stream;
mod videos;
pub mod webhooks;
mod webrtc;
mod weights;
mod world_page;

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};

pub use auth::{ApiKeys, MIN_PRIORITY};
pub use comfy::{ComfyConfig, DeviceInfo};
pub use error::ApiError;
pub use fastvideo_webrtc::{IceServer, RtcConfig};
pub use files::{FileObject, Files, DEFAULT_FILES_BUDGET};
pub use job::{Status, VideoObject};
pub use jobs::{Restored, Retention};
pub use listener::ConnLimits;
pub use params::{
    video_request_from_form, video_request_from_json, video_request_from_multipart, CreateParams, MediaNames,
    SecondsValue,
};
pub use rollouts::ROLLOUT_MEDIA_TYPE;
pub use state::{AppState, PromptWarnings, DEFAULT_BODY_LIMIT};
pub use store::Store;
pub use webhooks::{RetrySchedule, WebhookPolicy, Webhooks};
pub use webrtc::{WebRtc, WebRtcMetrics};

/// What happens to admitted work when the server is told to stop (SIGTERM or Ctrl-C).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DrainMode {
    /// Stop admitting, let queued and running jobs finish, then exit.
    #[default]
    Finish,
    /// Stop admitting and cancel everything admitted, then exit.
    Cancel,
}

/// How `fastvideo serve` listens and stops (its flags).
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address and port to listen on.
    pub addr: SocketAddr,
    /// What a stop signal does to admitted work.
    pub drain: DrainMode,
    /// Longest wait for admitted work during a drain before exiting anyway.
    pub drain_timeout: Duration,
    /// Connection limits: timeouts, how many at once, the close grace.
    pub limits: ConnLimits,
    /// After a restart, run stored unfinished jobs again (else they turn `failed`).
    pub requeue_unfinished: bool,
}

/// The HTTP API: every route over `state`, with the body limit and the auth check applied.
pub fn router(state: AppState) -> Router {
    let body_limit = state.body_limit;
    Router::new()
        .route("/v1/videos", post(videos::create_video).get(videos::list_videos))
        .route("/v1/videos/{id}", get(videos::get_video).delete(videos::delete_video))
        .route("/v1/videos/{id}/content", get(videos::video_content))
        .route("/v1/videos/{id}/events", get(stream::video_events))
        .route("/v1/stream", get(stream::websocket))
        .route("/v1/images/generations", post(images::generate_images))
        .route("/v1/images/edits", post(images::edit_images))
        .route("/v1/files", post(files::upload).get(files::list))
        .route("/v1/files/{id}", get(files::retrieve).delete(files::delete))
        .route("/v1/files/{id}/content", get(files::content))
        .route("/v1/rollouts", post(rollouts::create_rollout))
        .route("/v1/weights", get(weights::get_weights).post(weights::update_weights))
        .route("/v1/sessions", post(sessions::create_session))
        .route("/v1/sessions/{id}", get(sessions::get_session).delete(sessions::delete_session))
        .route("/v1/sessions/{id}/actions", post(sessions::post_action))
        .route("/v1/sessions/{id}/stream", get(sessions::session_stream))
        .route("/v1/sessions/{id}/webrtc", post(webrtc::offer))
        .route("/world", get(world_page::page))
        .route("/v1/models", get(models))
        .route("/v1/models/{name}/sleep", post(|s, n| residency(s, n, false)))
        .route("/v1/models/{name}/wake", post(|s, n| residency(s, n, true)))
        .route("/v1/chat/completions", post(chat::chat_completions))
        .route("/v1/completions", post(chat::completions))
        .route("/v1/capabilities", get(capabilities))
        .route("/version", get(version))
        .route("/health", get(|| async { Json(serde_json::json!({"status": "ok"})) }))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics))
        .merge(comfy::routes())
        .fallback(|| async { ApiError::NotFound { what: "route".into() } })
        .layer(axum::extract::DefaultBodyLimit::max(body_limit))
        .layer(axum::Extension(params::BodyLimit(body_limit)))
        .layer(axum::middleware::map_response(ApiError::json_errors))
        .layer(axum::middleware::from_fn_with_state(state.keys.clone(), auth::require_key))
        .with_state(state)
}

async fn models(State(s): State<AppState>) -> Json<serde_json::Value> {
    let data: Vec<serde_json::Value> = s
        .engine
        .models()
        .iter()
        .map(|(id, _)| {
            let mut m = serde_json::json!({"id": id, "object": "model", "created": 0, "owned_by": "fastvideo"});
            if let (Some(info), Some(m)) = (s.model_info.get(*id).and_then(|i| i.as_object()), m.as_object_mut()) {
                m.extend(info.clone());
            }
            m
        })
        .collect();
    Json(serde_json::json!({"object": "list", "data": data}))
}

/// `POST /v1/models/{name}/sleep|wake`: the model's transformer weights off the device (to host
/// memory) or back; a model with requests running is a 409, one that cannot sleep too.
async fn residency(
    State(s): State<AppState>,
    axum::extract::Path(name): axum::extract::Path<String>,
    resident: bool,
) -> Result<Json<serde_json::Value>, ApiError> {
    match s.engine.set_resident(&name, resident).await {
        Ok(on) => Ok(Json(serde_json::json!({"id": name, "object": "model", "resident": on}))),
        Err(fastvideo_engine::EngineError::Invalid(_)) => Err(ApiError::NotFound { what: format!("model `{name}`") }),
        Err(fastvideo_engine::EngineError::Failed { code, message }) => Err(ApiError::Conflict { code, message }),
        Err(e) => Err(e.into()),
    }
}

/// What the served model takes (tasks, the frame and size rules, limits, defaults, solvers), so
/// a client can build valid requests without trial and error.
async fn capabilities(State(s): State<AppState>) -> Json<serde_json::Value> {
    let samplers: Vec<&str> = fastvideo_request::SamplerKind::ALL.iter().map(|k| k.as_str()).collect();
    // One entry per served model, the primary first; a language model lists its context.
    let data: Vec<serde_json::Value> = s
        .engine
        .models()
        .iter()
        .map(|(id, limits)| {
            if limits.tasks == [fastvideo_request::TaskType::Text] {
                return serde_json::json!({
                    "model": id,
                    "tasks": limits.tasks,
                    "context_tokens": limits.max_steps,
                    "routes": ["/v1/chat/completions", "/v1/completions"],
                });
            }
            let mut entry = serde_json::json!({
                "model": id,
                "primary": *id == s.engine.model_id(),
                "offers": s.engine.offers(id),
                "limits": limits,
                "samplers": samplers,
            });
            // A model without frames (an image model) has no frame rule to state.
            if let Some(v) = &limits.video {
                entry["frames_rule"] = format!("frame_multiple × k + 1, at most {}", v.max_frames).into();
            }
            entry
        })
        .collect();
    Json(serde_json::json!({"object": "list", "data": data}))
}

/// The server's version.
async fn version() -> Json<serde_json::Value> {
    Json(serde_json::json!({"name": "fastvideo", "version": env!("CARGO_PKG_VERSION")}))
}

async fn ready(State(s): State<AppState>) -> impl IntoResponse {
    if s.engine.is_draining() {
        (StatusCode::SERVICE_UNAVAILABLE, Json(serde_json::json!({"status": "draining", "live": s.engine.live()})))
    } else {
        (StatusCode::OK, Json(serde_json::json!({"status": "ready", "live": s.engine.live()})))
    }
}

async fn metrics(State(s): State<AppState>) -> impl IntoResponse {
    let mut text = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &s.registry) {
        return (StatusCode::INTERNAL_SERVER_ERROR, format!("encoding metrics: {e}")).into_response();
    }
    ([(CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], text).into_response()
}

/// Resolves on SIGTERM or Ctrl-C.
async fn stop_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}

/// Serves until SIGTERM/Ctrl-C, then drains: `/ready` turns 503, new jobs are refused, admitted
/// ones finish (or are cancelled, per `cfg.drain`) while polls and downloads keep working, and
/// this returns once the engine is idle or `drain_timeout` passed, plus at most the connections'
/// close grace.
pub async fn serve(state: AppState, cfg: ServerConfig) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(cfg.addr)
        .await
        .map_err(|e| anyhow::anyhow!("--port: cannot listen on {}: {e}", cfg.addr))?;
    tracing::info!(addr = %listener.local_addr()?, model = state.engine.model_id(), "serving");
    eprintln!("fastvideo: serving {} on http://{}", state.engine.model_id(), listener.local_addr()?);
    let engine = state.engine.clone();
    let jobs = state.jobs.clone();
    if let Some(dir) = jobs.store_dir() {
        let r = jobs.restore(&engine, &state.keys, cfg.requeue_unfinished)?;
        eprintln!(
            "fastvideo: jobs stored in {}: {} finished, {} queued again, {} failed by the restart, {} lost their video, \
             {} webhooks to deliver",
            dir.display(),
            r.finished,
            r.requeued,
            r.failed,
            r.lost,
            r.webhooks
        );
    }
    if let Some(every) = jobs.sweep_interval() {
        let jobs = jobs.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                let n = jobs.sweep();
                if n > 0 {
                    tracing::info!(deleted = n, "expired videos deleted");
                }
            }
        });
    }
    let app = router(state);
    let drain = async move {
        stop_signal().await;
        eprintln!("fastvideo: draining ({} requests admitted, mode {:?})", engine.live(), cfg.drain);
        engine.drain(cfg.drain == DrainMode::Cancel);
        if tokio::time::timeout(cfg.drain_timeout, engine.idle()).await.is_err() {
            eprintln!("fastvideo: drain timeout; cancelling {} requests", engine.live());
            engine.drain(true);
            let _ = tokio::time::timeout(Duration::from_secs(5), engine.idle()).await;
        }
        // Let the last jobs' MP4 encodes land, and give pollers a moment to see them.
        let t0 = tokio::time::Instant::now();
        while jobs.unfinished() > 0 && t0.elapsed() < Duration::from_secs(30) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        eprintln!("fastvideo: drained");
    };
    // Once drained, open connections get `close_grace` to finish, whatever their clients do.
    listener::serve(listener, app, cfg.limits, drain).await?;
    Ok(())
}
