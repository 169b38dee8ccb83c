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

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, Result};
use axum::body::{Body, Bytes};
use axum::extract::{Multipart, Path as UrlPath, State};
use axum::http::header::{CONTENT_DISPOSITION, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::job::now_secs;
use crate::state::AppState;

/// Bytes all uploads together may take, by default.
pub const DEFAULT_FILES_BUDGET: u64 = 1 << 30;

/// What OpenAI's client reads back (`FileObject`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FileObject {
    pub id: String,
    pub object: String,
    pub bytes: u64,
    pub created_at: u64,
    pub filename: String,
    pub purpose: String,
    /// Always `processed`: nothing happens to a file after upload.
    pub status: String,
}

#[derive(Serialize, Deserialize)]
struct Meta {
    file: FileObject,
    owner: Option<String>,
}

struct Stored {
    meta: Meta,
    /// Shared with the request that uploaded it and with downloads (no copies).
    data: Bytes,
}

#[derive(Default)]
struct Inner {
    files: BTreeMap<String, Stored>,
    /// Bytes of uploads being written, counted against the budget until they are in `files`.
    reserved: u64,
}

/// The uploaded files.
pub struct Files {
    dir: Option<PathBuf>,
    budget: u64,
    inner: Mutex<Inner>,
}

impl Default for Files {
    fn default() -> Self {
        Self { dir: None, budget: DEFAULT_FILES_BUDGET, inner: Mutex::default() }
    }
}

impl Files {
    /// Files kept in `dir` (created), with what an earlier process left there; `budget` bytes
    /// in all.
    pub fn open(dir: &Path, budget: u64) -> Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut files = BTreeMap::new();
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
            if name.ends_with(".tmp") {
                let _ = std::fs::remove_file(&path);
                continue;
            }
            let Some(id) = name.strip_suffix(".json") else { continue };
            let meta: Option<Meta> = std::fs::read(&path).ok().and_then(|b| serde_json::from_slice(&b).ok());
            let data = std::fs::read(dir.join(id)).ok();
            match (meta, data) {
                (Some(meta), Some(data)) if data.len() as u64 == meta.file.bytes => {
                    files.insert(id.to_string(), Stored { meta, data: data.into() });
                }
                _ => {
                    let _ = std::fs::remove_file(&path);
                    let _ = std::fs::remove_file(dir.join(id));
                }
            }
        }
        // Data without metadata: an upload cut short.
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
            if !name.ends_with(".json") && !files.contains_key(&name) {
                let _ = std::fs::remove_file(&path);
            }
        }
        Ok(Self { dir: Some(dir.to_path_buf()), budget, inner: Mutex::new(Inner { files, reserved: 0 }) })
    }

    /// How many files are kept (for the log line at start).
    pub fn len(&self) -> usize {
        self.inner.lock().unwrap().files.len()
    }

    /// Whether no file is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stores an upload within the budget. Blocking (it writes and fsyncs): run it on the
    /// blocking pool. The lock is held only to reserve the bytes and to insert the file.
    fn add(&self, file: FileObject, owner: Option<String>, data: Bytes) -> Result<FileObject, ApiError> {
        let size = data.len() as u64;
        {
            let mut g = self.inner.lock().unwrap();
            let used = g.files.values().map(|s| s.meta.file.bytes).sum::<u64>() + g.reserved;
            if used + size > self.budget {
                return Err(ApiError::InsufficientStorage {
                    message: format!(
                        "uploads are at their budget ({used} of {} bytes); delete files (DELETE /v1/files/ID) first",
                        self.budget
                    ),
                });
            }
            g.reserved += size;
        }
        let meta = Meta { file: file.clone(), owner };
        let written = match &self.dir {
            Some(dir) => write_upload(dir, &meta, &data),
            None => Ok(()),
        };
        let mut g = self.inner.lock().unwrap();
        g.reserved -= size;
        written.map_err(|e| ApiError::Internal {
            code: "storage".into(),
            message: format!("storing the upload: {e:#}"),
        })?;
        g.files.insert(file.id.clone(), Stored { meta, data });
        Ok(file)
    }

    fn get(&self, id: &str, owner: &Option<String>) -> Option<(FileObject, Bytes)> {
        let g = self.inner.lock().unwrap();
        g.files.get(id).filter(|s| &s.meta.owner == owner).map(|s| (s.meta.file.clone(), s.data.clone()))
    }

    fn list(&self, owner: &Option<String>) -> Vec<FileObject> {
        let g = self.inner.lock().unwrap();
        let mut v: Vec<FileObject> =
            g.files.values().filter(|s| &s.meta.owner == owner).map(|s| s.meta.file.clone()).collect();
        v.sort_by(|a, b| b.created_at.cmp(&a.created_at).then_with(|| a.id.cmp(&b.id)));
        v
    }

    /// Forgets an upload and deletes its files. Blocking (unlinking a large file takes a
    /// while): run it on the blocking pool.
    fn remove(&self, id: &str, owner: &Option<String>) -> bool {
        {
            let mut g = self.inner.lock().unwrap();
            if g.files.get(id).is_none_or(|s| &s.meta.owner != owner) {
                return false;
            }
            g.files.remove(id);
        }
        if let Some(dir) = &self.dir {
            // Metadata first: a crash between the two leaves data that the next start deletes.
            let _ = std::fs::remove_file(dir.join(format!("{id}.json")));
            let _ = std::fs::remove_file(dir.join(id));
        }
        true
    }

    /// The base64 of uploaded file `id` for `owner`, for a request field that names it.
    pub(crate) fn base64_of(&self, id: &str, owner: &Option<String>, field: &str) -> Result<String, ApiError> {
        use base64::Engine as _;
        let (_, data) = self.get(id, owner).ok_or_else(|| {
            ApiError::field(field, format!("{field}: no uploaded file `{id}` (upload it with POST /v1/files)"))
        })?;
        Ok(base64::engine::general_purpose::STANDARD.encode(&data))
    }
}

/// An upload's data, then its metadata, each written to a temporary name, fsynced and renamed
/// into place, then the folder fsynced so both renames are on disk before the client hears of
/// the upload (a crash before that leaves at worst data without metadata, deleted at start).
fn write_upload(dir: &Path, meta: &Meta, data: &[u8]) -> Result<()> {
    let id = &meta.file.id;
    write_atomically(&dir.join(id), data)?;
    write_atomically(&dir.join(format!("{id}.json")), &serde_json::to_vec(meta)?)?;
    std::fs::File::open(dir)?.sync_all().with_context(|| format!("syncing {}", dir.display()))?;
    Ok(())
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// Whether a request's media value names an upload rather than carrying the bytes (base64 has
/// no `-`, so the two never collide).
pub(crate) fn is_file_id(s: &str) -> bool {
    s.starts_with("file-") && s.len() > 5 && s[5..].bytes().all(|b| b.is_ascii_alphanumeric())
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn object(id: &str, bytes: u64) -> FileObject {
        FileObject {
            id: id.into(),
            object: "file".into(),
            bytes,
            created_at: 1,
            filename: "a.png".into(),
            purpose: "vision".into(),
            status: "processed".into(),
        }
    }

    #[test]
    fn ids_are_told_from_base64() {
        assert!(is_file_id("file-abc123"));
        for s in ["file-", "file-a/b", "data:image/png;base64,AAAA", "iVBORw0KGgo=", "file_abc"] {
            assert!(!is_file_id(s), "{s}");
        }
    }

    #[test]
    fn uploads_survive_a_restart_and_belong_to_their_owner() {
        let dir = tempfile::tempdir().unwrap();
        let owner = Some("k1".to_string());
        {
            let files = Files::open(dir.path(), 100).unwrap();
            files.add(object("file-a", 3), owner.clone(), vec![1, 2, 3].into()).unwrap();
            files.add(object("file-b", 2), None, vec![4, 5].into()).unwrap();
            // Over the budget: refused, nothing written.
            let e = files.add(object("file-c", 96), None, vec![0; 96].into()).err().unwrap();
            assert!(matches!(e, ApiError::InsufficientStorage { .. }), "{e:?}");
        }
        // A crash mid-upload left data without metadata, and a temporary file.
        std::fs::write(dir.path().join("file-d"), b"xx").unwrap();
        std::fs::write(dir.path().join("file-e.tmp"), b"xx").unwrap();
        let files = Files::open(dir.path(), 100).unwrap();
        assert_eq!(files.len(), 2);
        assert!(!dir.path().join("file-d").exists() && !dir.path().join("file-e.tmp").exists());
        assert_eq!(files.get("file-a", &owner).unwrap().1[..], [1, 2, 3]);
        assert!(files.get("file-a", &None).is_none(), "another key does not see it");
        assert_eq!(files.list(&None).len(), 1);
        assert!(!files.remove("file-a", &None));
        assert!(files.remove("file-a", &owner));
        assert!(!dir.path().join("file-a").exists() && !dir.path().join("file-a.json").exists());
        assert_eq!(Files::open(dir.path(), 100).unwrap().len(), 1);
    }
}
