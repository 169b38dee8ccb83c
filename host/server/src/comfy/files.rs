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
    let Some(mut path) = confined(&base, &sub, &name) else {
        return (StatusCode::FORBIDDEN, "the path leaves its folder").into_response();
    };
    let mut stored = name.clone();
    if !overwrite {
        let (stem, ext) = match name.rsplit_once('.') {
            Some((s, e)) => (s.to_string(), format!(".{e}")),
            None => (name.clone(), String::new()),
        };
        let mut i = 1;
        // The same bytes under the same name are the same upload: nothing to write.
        while path.exists() && std::fs::read(&path).map_or(true, |old| old != data) {
            stored = format!("{stem} ({i}){ext}");
            path = base.join(&sub).join(&stored);
            i += 1;
        }
    }
    if let Some(dir) = path.parent() {
        if let Err(e) = tokio::fs::create_dir_all(dir).await {
            return (StatusCode::INTERNAL_SERVER_ERROR, format!("{}: {e}", dir.display())).into_response();
        }
    }
    if let Err(e) = tokio::fs::write(&path, &data).await {
        return (StatusCode::INTERNAL_SERVER_ERROR, format!("{}: {e}", path.display())).into_response();
    }
    Json(json!({ "name": stored, "subfolder": sub, "type": kind })).into_response()
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
