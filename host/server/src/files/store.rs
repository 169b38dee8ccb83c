//! The uploaded files: a registry under a byte budget, kept in memory or on disk (each file
//! written to a temporary name, fsynced and renamed, the data before its metadata), with what an
//! earlier process left there read back at start. The routes are the parent's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, Result};
use axum::body::Bytes;
use serde::{Deserialize, Serialize};

use crate::error::ApiError;

/// Bytes all uploads together may take, by default.
pub const DEFAULT_FILES_BUDGET: u64 = 1 << 30;

/// What OpenAI's client reads back (`FileObject`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FileObject {
    /// The file's id (`file-…`), what requests name it by.
    pub id: String,
    /// Always `file`.
    pub object: String,
    /// Its size.
    pub bytes: u64,
    /// Upload time, Unix seconds.
    pub created_at: u64,
    /// The name it was uploaded with.
    pub filename: String,
    /// The purpose it was uploaded for, as given.
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
    pub(super) fn add(&self, file: FileObject, owner: Option<String>, data: Bytes) -> Result<FileObject, ApiError> {
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

    pub(super) fn get(&self, id: &str, owner: &Option<String>) -> Option<(FileObject, Bytes)> {
        let g = self.inner.lock().unwrap();
        g.files.get(id).filter(|s| &s.meta.owner == owner).map(|s| (s.meta.file.clone(), s.data.clone()))
    }

    pub(super) fn list(&self, owner: &Option<String>) -> Vec<FileObject> {
        let g = self.inner.lock().unwrap();
        let mut v: Vec<FileObject> =
            g.files.values().filter(|s| &s.meta.owner == owner).map(|s| s.meta.file.clone()).collect();
        v.sort_by(|a, b| b.created_at.cmp(&a.created_at).then_with(|| a.id.cmp(&b.id)));
        v
    }

    /// Forgets an upload and deletes its files. Blocking (unlinking a large file takes a
    /// while): run it on the blocking pool.
    pub(super) fn remove(&self, id: &str, owner: &Option<String>) -> bool {
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
