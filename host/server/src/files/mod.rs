//! `/v1/files`: OpenAI's Files API, as far as a video server needs it: a picture or video is
//! uploaded once and requests name it by id (`"input_reference": "file-…"`), so a client that
//! sends JSON need not inline base64, and one upload serves many requests.
//!
//! Files belong to the API key that uploaded them, like jobs. With a data directory they are
//! kept on disk (`DIR/<id>` and `DIR/<id>.json`, each written to a temporary name and renamed,
//! the data first, so a crash leaves at worst data without metadata, deleted at the next start);
//! without one they live in memory until deleted or the process ends. A byte budget bounds them.
//! Writes and fsyncs run on tokio's blocking pool, outside the registry's lock: storing a large
//! upload must not hold the async workers (health checks, polls) or other uploads.

use axum::body::Body;
use axum::extract::{Multipart, Path as UrlPath, State};
use axum::http::header::{CONTENT_DISPOSITION, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::job::now_secs;
use crate::state::AppState;

pub(crate) mod store;

pub use store::{FileObject, Files, DEFAULT_FILES_BUDGET};

fn not_found(id: &str) -> ApiError {
    ApiError::NotFound { what: format!("file `{id}`") }
}

/// `POST /v1/files`: multipart `file` (required) and `purpose` (OpenAI's; any value is kept).
pub async fn upload(
    State(s): State<AppState>,
    Extension(who): Extension<Caller>,
    mut form: Multipart,
) -> Result<Json<FileObject>, ApiError> {
    let (mut file, mut purpose) = (None, None);
    let limit = Some(crate::params::BodyLimit(s.body_limit));
    let unreadable = |e: axum::extract::multipart::MultipartError| crate::params::unreadable("file", &e, limit);
    while let Some(field) = form.next_field().await.map_err(unreadable)? {
        match field.name().unwrap_or_default() {
            "file" => {
                let name = field.file_name().unwrap_or("upload").to_string();
                file = Some((name, field.bytes().await.map_err(unreadable)?));
            }
            "purpose" => purpose = Some(field.text().await.map_err(unreadable)?),
            other => return Err(ApiError::field(other, format!("{other}: not a field of /v1/files (file, purpose)"))),
        }
    }
    let (filename, data) = file.ok_or_else(|| ApiError::field("file", "file: required (a multipart file field)"))?;
    if data.is_empty() {
        return Err(ApiError::field("file", "file: empty"));
    }
    let id = s.new_id("file").replacen("file_", "file-", 1);
    let object = FileObject {
        id,
        object: "file".into(),
        bytes: data.len() as u64,
        created_at: now_secs(),
        filename,
        purpose: purpose.unwrap_or_else(|| "user_data".into()),
        status: "processed".into(),
    };
    let (files, owner) = (s.files.clone(), s.keys.owner_tag(who));
    let stored = tokio::task::spawn_blocking(move || files.add(object, owner, data)).await;
    Ok(Json(stored.map_err(|e| ApiError::Internal { code: "storage".into(), message: e.to_string() })??))
}

pub async fn list(State(s): State<AppState>, Extension(who): Extension<Caller>) -> Json<serde_json::Value> {
    let data = s.files.list(&s.keys.owner_tag(who));
    Json(serde_json::json!({ "object": "list", "data": data, "has_more": false }))
}

pub async fn retrieve(
    State(s): State<AppState>,
    Extension(who): Extension<Caller>,
    UrlPath(id): UrlPath<String>,
) -> Result<Json<FileObject>, ApiError> {
    s.files.get(&id, &s.keys.owner_tag(who)).map(|(f, _)| Json(f)).ok_or_else(|| not_found(&id))
}

pub async fn content(
    State(s): State<AppState>,
    Extension(who): Extension<Caller>,
    UrlPath(id): UrlPath<String>,
) -> Result<Response, ApiError> {
    let (f, data) = s.files.get(&id, &s.keys.owner_tag(who)).ok_or_else(|| not_found(&id))?;
    let disposition = format!("attachment; filename=\"{}\"", f.filename.replace(['"', '\\', '\r', '\n'], "_"));
    Ok(([(CONTENT_TYPE, "application/octet-stream".to_string()), (CONTENT_DISPOSITION, disposition)], Body::from(data))
        .into_response())
}

pub async fn delete(
    State(s): State<AppState>,
    Extension(who): Extension<Caller>,
    UrlPath(id): UrlPath<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let (files, owner, file) = (s.files.clone(), s.keys.owner_tag(who), id.clone());
    let removed = tokio::task::spawn_blocking(move || files.remove(&file, &owner)).await;
    if !removed.map_err(|e| ApiError::Internal { code: "storage".into(), message: e.to_string() })? {
        return Err(not_found(&id));
    }
    Ok(Json(serde_json::json!({ "id": id, "object": "file", "deleted": true })))
}
