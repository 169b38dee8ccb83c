//! `GET /world`: the browser page for world-model sessions (source in `examples/world/`). One
//! self-contained HTML file, no build step and no external assets, so it works offline.

use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::IntoResponse;

const PAGE: &str = include_str!("../../../examples/world/index.html");

pub async fn page() -> impl IntoResponse {
    ([(CONTENT_TYPE, "text/html; charset=utf-8"), (CACHE_CONTROL, "no-cache")], PAGE)
}
