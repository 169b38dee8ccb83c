//! The ComfyUI API as a handler argument: present only when the deploy turned it on.

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::service::Comfy;
use crate::state::AppState;

/// The API as a handler argument; when it is off, the request gets a 404 naming how to
/// enable it.
pub struct Api(pub(super) Arc<Comfy>);

impl axum::extract::FromRequestParts<AppState> for Api {
    type Rejection = Response;

    async fn from_request_parts(_: &mut axum::http::request::Parts, s: &AppState) -> Result<Self, Response> {
        s.comfy.clone().map(Api).ok_or_else(|| {
            let msg = "the ComfyUI API is off: start `fastvideo serve --deploy` with a deploy that enables workflow translators";
            let error = json!({ "error": { "type": "not_enabled", "message": msg, "details": "", "extra_info": {} } });
            (StatusCode::NOT_FOUND, Json(error)).into_response()
        })
    }
}
