//! `GET /v1/weights` (which weights serve: epoch, blake3, source) and `POST /v1/weights`
//! (load new transformer weights and swap them in between steps; see
//! `fastvideo_engine::Engine::update_weights` for what happens to requests in flight).
//!
//! `POST` takes either JSON `{"path": "<file or folder on the server>"}` or the safetensors
//! file itself as the body (`Content-Type: application/octet-stream`, up to [`MAX_UPLOAD`]).
//! Weights that do not load are refused with 400 naming the file and tensor; the old ones keep
//! serving.

use std::path::PathBuf;

use axum::extract::{Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::Json;
use serde::Deserialize;

use crate::error::ApiError;
use crate::params::read_body;
use crate::state::AppState;

/// Largest weights upload taken in the body; larger checkpoints are given by path.
pub const MAX_UPLOAD: usize = 2 << 30;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateBody {
    path: String,
}

pub async fn get_weights(State(s): State<AppState>) -> Result<Json<serde_json::Value>, ApiError> {
    let info = s.engine.weights().await?;
    Ok(Json(serde_json::json!({"object": "weights", "model": s.engine.model_id(), "epoch": info.epoch,
        "hash": info.hash, "source": info.source, "since": info.since})))
}

/// An uploaded checkpoint on disk for as long as the load takes.
struct Upload(PathBuf);

impl Drop for Upload {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

pub async fn update_weights(State(s): State<AppState>, req: Request) -> Result<Json<serde_json::Value>, ApiError> {
    let binary = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/octet-stream"));
    let (path, upload) = if binary {
        let bytes = axum::body::to_bytes(req.into_body(), MAX_UPLOAD).await.map_err(|e| {
            ApiError::field(
                "body",
                format!("body: unreadable or over {} MiB ({e}); give a path instead", MAX_UPLOAD >> 20),
            )
        })?;
        if bytes.is_empty() {
            return Err(ApiError::field("body", "body: empty; send a safetensors file or {\"path\": ...}"));
        }
        let path = std::env::temp_dir().join(format!("{}.safetensors", s.new_id("weights")));
        tokio::fs::write(&path, &bytes).await.map_err(|e| ApiError::Internal {
            code: "upload_failed".into(),
            message: format!("{}: {e}", path.display()),
        })?;
        (path.clone(), Some(Upload(path)))
    } else {
        let b: UpdateBody = read_body(req).await?;
        if b.path.trim().is_empty() {
            return Err(ApiError::field("path", "path: must not be empty"));
        }
        (PathBuf::from(b.path), None)
    };
    let label = upload.as_ref().map(|_| PathBuf::from("upload"));
    let info = s.engine.update_weights(path, label).await?;
    Ok(Json(serde_json::json!({"object": "weights", "model": s.engine.model_id(), "epoch": info.epoch,
        "hash": info.hash, "source": info.source, "since": info.since})))
}
