//! `/view` (what prompts wrote, and uploads) and `/upload/image`, confined to their folders.

use std::path::{Component, Path, PathBuf};

use axum::extract::{Multipart, Query};
use axum::http::header::{CONTENT_DISPOSITION, CONTENT_TYPE};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::json;

use super::api::Api;
use crate::params::{unreadable, BodyLimit};

#[derive(Deserialize)]
pub struct ViewQuery {
    filename: Option<String>,
    #[serde(default)]
    subfolder: String,
    #[serde(rename = "type")]
    kind: Option<String>,
}

/// `sub/name` under `base`, or `None` when either climbs out of it.
fn confined(base: &Path, sub: &str, name: &str) -> Option<PathBuf> {
    let plain = |p: &Path| p.components().all(|c| matches!(c, Component::Normal(_)));
    let name_ok = !name.is_empty() && !name.contains('/') && !name.contains('\\') && plain(Path::new(name));
    (name_ok && plain(Path::new(sub))).then(|| base.join(sub).join(name))
}

fn content_type(name: &str) -> &'static str {
    match name.rsplit('.').next().map(str::to_ascii_lowercase).as_deref() {
        Some("mp4") => "video/mp4",
        Some("png") => "image/png",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("webp") => "image/webp",
        Some("gif") => "image/gif",
        Some("json") => "application/json",
        _ => "application/octet-stream",
    }
}

/// The folder of a `type` (`output`, `input`, `temp`).
fn folder(root: &Path, kind: Option<&str>) -> Option<PathBuf> {
    match kind.unwrap_or("output") {
        k @ ("output" | "input" | "temp") => Some(root.join(k)),
        _ => None,
    }
}

pub async fn view(Api(c): Api, Query(q): Query<ViewQuery>) -> Response {
    // ComfyUI's answers: no filename 404, a climbing filename or unknown type 400, a climbing
    // subfolder 403.
    let Some(name) = q.filename else { return StatusCode::NOT_FOUND.into_response() };
    if name.is_empty() || name.starts_with('/') || name.contains("..") {
        return (StatusCode::BAD_REQUEST, "filename must be a plain file name").into_response();
    }
    let Some(base) = folder(&c.cfg.root, q.kind.as_deref()) else {
        return (StatusCode::BAD_REQUEST, "type must be output, input or temp").into_response();
    };
    let Some(path) = confined(&base, &q.subfolder, &name) else {
        return (StatusCode::FORBIDDEN, "the path leaves its folder").into_response();
    };
    match tokio::fs::read(&path).await {
        Ok(bytes) => (
            [(CONTENT_TYPE, content_type(&name).to_string()), (CONTENT_DISPOSITION, format!("filename=\"{name}\""))],
            bytes,
        )
            .into_response(),
        Err(_) => StatusCode::NOT_FOUND.into_response(),
    }
}

/// Saves the multipart `image` under `input/` (or `type`'s folder), renaming `name (1).ext`
/// on a clash unless `overwrite` is true, as ComfyUI does.
pub async fn upload_image(Api(c): Api, limit: Option<Extension<BodyLimit>>, mut form: Multipart) -> Response {
    let limit = limit.map(|Extension(l)| l);
    let (mut file, mut overwrite, mut sub, mut kind) = (None, false, String::new(), "input".to_string());
    loop {
        let field = match form.next_field().await {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) => return unreadable("image", &e, limit).into_response(),
        };
        let name = field.name().unwrap_or_default().to_string();
        let filename = field.file_name().map(String::from);
        let data = match field.bytes().await {
            Ok(d) => d,
            Err(e) => return unreadable(&name, &e, limit).into_response(),
        };
        match name.as_str() {
            "image" => file = filename.map(|f| (f, data)),
            "overwrite" => overwrite = matches!(&*String::from_utf8_lossy(&data), "true" | "1"),
            "subfolder" => sub = String::from_utf8_lossy(&data).into_owned(),
            "type" => kind = String::from_utf8_lossy(&data).into_owned(),
            _ => {}
        }
    }
    let Some((name, data)) = file else { return StatusCode::BAD_REQUEST.into_response() };
    let Some(base) = folder(&c.cfg.root, Some(&kind)) else {
        return (StatusCode::BAD_REQUEST, "type must be output, input or temp").into_response();
    };
    if confined(&base, &sub, &name).is_none() {
        return (StatusCode::FORBIDDEN, "the path leaves its folder").into_response();
    }
    // Written and fsynced on the blocking pool: a large upload must not hold an async worker
    // (and with it /health) for the seconds a sync of hundreds of MiB takes.
    let (dir, file) = (base.join(&sub), name.clone());
    let stored = tokio::task::spawn_blocking(move || store(&dir, &file, &data, overwrite)).await;
    match stored {
        Ok(Ok(stored)) => Json(json!({ "name": stored, "subfolder": sub, "type": kind })).into_response(),
        Ok(Err(e)) => (StatusCode::INTERNAL_SERVER_ERROR, format!("storing {name}: {e}")).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("storing {name}: {e}")).into_response(),
    }
}

/// Picks an upload's stored name and renames onto it, so two uploads of one name do not both
/// take it.
static NAMING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Stores `data` as `name` in `dir` (blocking), or as `name (1).ext`… on a clash unless
/// `overwrite`, as ComfyUI does; the same bytes under the same name are the same upload, kept
/// as is. Durable once this returns: written to a temporary file and fsynced, renamed into
/// place, the folder fsynced, so an acknowledged upload is whole after a crash, and a crash
/// mid-write leaves only a `.tmp` (never listed as an input).
fn store(dir: &Path, name: &str, data: &[u8], overwrite: bool) -> std::io::Result<String> {
    use std::io::Write;
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEQ: AtomicU64 = AtomicU64::new(0);
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".upload-{}-{}.tmp", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed)));
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(data)?;
        f.sync_all()
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    let (stem, ext) = match name.rsplit_once('.') {
        Some((s, e)) => (s.to_string(), format!(".{e}")),
        None => (name.to_string(), String::new()),
    };
    let naming = NAMING.lock().unwrap_or_else(|e| e.into_inner());
    let (mut stored, mut i) = (name.to_string(), 1);
    let kept = loop {
        let path = dir.join(&stored);
        if overwrite || !path.exists() {
            break std::fs::rename(&tmp, &path).map(|_| false);
        }
        if std::fs::read(&path).is_ok_and(|old| old == data) {
            break Ok(true);
        }
        stored = format!("{stem} ({i}){ext}");
        i += 1;
    };
    drop(naming);
    if !matches!(kept, Ok(false)) {
        let _ = std::fs::remove_file(&tmp);
    }
    kept?;
    std::fs::File::open(dir)?.sync_all()?;
    Ok(stored)
}

#[cfg(test)]
mod tests {
    use super::confined;
    use std::path::Path;

    #[test]
    fn paths_stay_in_their_folder() {
        let base = Path::new("/srv/output");
        assert_eq!(confined(base, "video", "a.mp4").unwrap(), Path::new("/srv/output/video/a.mp4"));
        assert_eq!(confined(base, "", "a.mp4").unwrap(), Path::new("/srv/output/a.mp4"));
        for (sub, name) in
            [("..", "a"), ("", "../a"), ("/etc", "passwd"), ("", "/etc/passwd"), ("a/../..", "b"), ("", "")]
        {
            assert!(confined(base, sub, name).is_none(), "{sub} {name}");
        }
    }
}
