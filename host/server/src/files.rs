//! `/v1/files`: OpenAI's Files API, as far as a video server needs it: a picture or video is
//! uploaded once and requests name it by id (`"input_reference": "file-…"`), so a client that
//! sends JSON need not inline base64, and one upload serves many requests.
//!
//! Files belong to the API key that uploaded them, like jobs. With a data directory they are
//! kept on disk (`DIR/<id>` and `DIR/<id>.json`, each written to a temporary name and renamed,
//! the data first, so a crash leaves at worst data without metadata, deleted at the next start);
//! without one they live in memory until deleted or the process ends. A byte budget bounds them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use axum::body::Body;
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
    data: Arc<Vec<u8>>,
}

/// The uploaded files.
pub struct Files {
    dir: Option<PathBuf>,
    budget: u64,
    inner: Mutex<BTreeMap<String, Stored>>,
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
                    files.insert(id.to_string(), Stored { meta, data: Arc::new(data) });
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
        Ok(Self { dir: Some(dir.to_path_buf()), budget, inner: Mutex::new(files) })
    }

    /// How many files are kept (for the log line at start).
    pub fn len(&self) -> usize {
        self.inner.lock().unwrap().len()
    }

    /// Whether no file is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn add(&self, file: FileObject, owner: Option<String>, data: Vec<u8>) -> Result<FileObject, ApiError> {
        let mut g = self.inner.lock().unwrap();
        let used: u64 = g.values().map(|s| s.meta.file.bytes).sum();
        if used + data.len() as u64 > self.budget {
            return Err(ApiError::InsufficientStorage {
                message: format!(
                    "uploads are at their budget ({used} of {} bytes); delete files (DELETE /v1/files/ID) first",
                    self.budget
                ),
            });
        }
        let meta = Meta { file: file.clone(), owner };
        if let Some(dir) = &self.dir {
            write_atomically(&dir.join(&file.id), &data)
                .and_then(|_| write_atomically(&dir.join(format!("{}.json", file.id)), &serde_json::to_vec(&meta)?))
                .map_err(|e| ApiError::Internal {
                    code: "storage".into(),
                    message: format!("storing the upload: {e}"),
                })?;
        }
        g.insert(file.id.clone(), Stored { meta, data: Arc::new(data) });
        Ok(file)
    }

    fn get(&self, id: &str, owner: &Option<String>) -> Option<(FileObject, Arc<Vec<u8>>)> {
        let g = self.inner.lock().unwrap();
        g.get(id).filter(|s| &s.meta.owner == owner).map(|s| (s.meta.file.clone(), s.data.clone()))
    }

    fn list(&self, owner: &Option<String>) -> Vec<FileObject> {
        let g = self.inner.lock().unwrap();
        let mut v: Vec<FileObject> =
            g.values().filter(|s| &s.meta.owner == owner).map(|s| s.meta.file.clone()).collect();
        v.sort_by(|a, b| b.created_at.cmp(&a.created_at).then_with(|| a.id.cmp(&b.id)));
        v
    }

    fn remove(&self, id: &str, owner: &Option<String>) -> bool {
        let mut g = self.inner.lock().unwrap();
        if g.get(id).is_none_or(|s| &s.meta.owner != owner) {
            return false;
        }
        g.remove(id);
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
        Ok(base64::engine::general_purpose::STANDARD.encode(data.as_slice()))
    }
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
                file = Some((name, field.bytes().await.map_err(unreadable)?.to_vec()));
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
    Ok(Json(s.files.add(object, s.keys.owner_tag(who), data)?))
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
    Ok((
        [(CONTENT_TYPE, "application/octet-stream".to_string()), (CONTENT_DISPOSITION, disposition)],
        Body::from(data.to_vec()),
    )
        .into_response())
}

pub async fn delete(
    State(s): State<AppState>,
    Extension(who): Extension<Caller>,
    UrlPath(id): UrlPath<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    if !s.files.remove(&id, &s.keys.owner_tag(who)) {
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
            files.add(object("file-a", 3), owner.clone(), vec![1, 2, 3]).unwrap();
            files.add(object("file-b", 2), None, vec![4, 5]).unwrap();
            // Over the budget: refused, nothing written.
            let e = files.add(object("file-c", 96), None, vec![0; 96]).err().unwrap();
            assert!(matches!(e, ApiError::InsufficientStorage { .. }), "{e:?}");
        }
        // A crash mid-upload left data without metadata, and a temporary file.
        std::fs::write(dir.path().join("file-d"), b"xx").unwrap();
        std::fs::write(dir.path().join("file-e.tmp"), b"xx").unwrap();
        let files = Files::open(dir.path(), 100).unwrap();
        assert_eq!(files.len(), 2);
        assert!(!dir.path().join("file-d").exists() && !dir.path().join("file-e.tmp").exists());
        assert_eq!(files.get("file-a", &owner).unwrap().1.as_slice(), &[1, 2, 3]);
        assert!(files.get("file-a", &None).is_none(), "another key does not see it");
        assert_eq!(files.list(&None).len(), 1);
        assert!(!files.remove("file-a", &None));
        assert!(files.remove("file-a", &owner));
        assert!(!dir.path().join("file-a").exists() && !dir.path().join("file-a.json").exists());
        assert_eq!(Files::open(dir.path(), 100).unwrap().len(), 1);
    }
}
