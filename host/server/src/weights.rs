//! `GET /v1/weights` (which weights serve: epoch, blake3, source) and `POST /v1/weights`
//! (load new transformer weights and swap them in between steps; see
//! `fastvideo_engine::Engine::update_weights` for what happens to requests in flight).
//!
//! `POST` takes either JSON `{"path": "<file or folder on the server>"}` or the safetensors
//! file itself as the body (`Content-Type: application/octet-stream`, up to [`MAX_UPLOAD`]).
//! Weights that do not load are refused with 400 naming the file and tensor; the old ones keep
//! serving.

use std::path::PathBuf;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, Request, State};
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
    /// Which served model (none: the primary); the query's `model` when the body is the file.
    #[serde(default)]
    model: Option<String>,
}

/// `?model=NAME`: which served model a weights route is about (none: the primary). Other query
/// parameters are ignored, as before the parameter existed.
#[derive(Deserialize, Default)]
pub struct WhichModel {
    model: Option<String>,
}

type ModelQuery = Result<Query<WhichModel>, QueryRejection>;

/// The query's model, a malformed query refused as JSON naming it.
fn which(q: ModelQuery) -> Result<Option<String>, ApiError> {
    q.map(|Query(q)| q.model).map_err(|e| ApiError::field("model", format!("query: {}", e.body_text())))
}

pub async fn get_weights(State(s): State<AppState>, q: ModelQuery) -> Result<Json<serde_json::Value>, ApiError> {
    let model = which(q)?;
    let info = s.engine.weights(model.as_deref()).await?;
    Ok(Json(weights_object(model.as_deref().unwrap_or(s.engine.model_id()), &info)))
}

fn weights_object(model: &str, info: &fastvideo_engine::WeightsInfo) -> serde_json::Value {
    serde_json::json!({"object": "weights", "model": model, "epoch": info.epoch,
        "hash": info.hash, "source": info.source, "since": info.since})
}

/// An uploaded checkpoint on disk for as long as the load takes.
struct Upload(PathBuf);

impl Drop for Upload {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

pub async fn update_weights(
    State(s): State<AppState>,
    q: ModelQuery,
    req: Request,
) -> Result<Json<serde_json::Value>, ApiError> {
    let query_model = which(q)?;
    let binary = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/octet-stream"));
    let (path, upload, model) = if binary {
        let bytes = axum::body::to_bytes(req.into_body(), MAX_UPLOAD).await.map_err(|e| {
            // Past the limit it is the documented 413, as every other route answers.
            let over = std::iter::successors(std::error::Error::source(&e), |s| s.source())
                .any(|s| s.is::<http_body_util::LengthLimitError>());
            match over {
                true => crate::params::too_large(Some(crate::params::BodyLimit(MAX_UPLOAD))),
                false => ApiError::field("body", format!("body: unreadable ({e}); give a path instead")),
            }
        })?;
        if bytes.is_empty() {
            return Err(ApiError::field("body", "body: empty; send a safetensors file or {\"path\": ...}"));
        }
        let path = std::env::temp_dir().join(format!("{}.safetensors", s.new_id("weights")));
        tokio::fs::write(&path, &bytes).await.map_err(|e| ApiError::Internal {
            code: "upload_failed".into(),
            message: format!("{}: {e}", path.display()),
        })?;
        (path.clone(), Some(Upload(path)), query_model)
    } else {
        let b: UpdateBody = read_body(req).await?;
        if b.path.trim().is_empty() {
            return Err(ApiError::field("path", "path: must not be empty"));
        }
        let model = match (b.model, query_model) {
            (Some(a), Some(q)) if a != q => {
                return Err(ApiError::field("model", format!("model: `{a}` in the body, `{q}` in the query; give one")))
            }
            (a, q) => a.or(q),
        };
        (PathBuf::from(b.path), None, model)
    };
    let label = upload.as_ref().map(|_| PathBuf::from("upload"));
    let info = s.engine.update_weights(model.as_deref(), path, label).await?;
    Ok(Json(weights_object(model.as_deref().unwrap_or(s.engine.model_id()), &info)))
}
