//! The one error type of the HTTP API and its one mapping to status codes. Bodies follow
//! OpenAI's shape, `{"error": {"message", "type", "param", "code"}}`, so OpenAI clients raise
//! their usual exceptions (`BadRequestError`, `NotFoundError` …) with our message in them.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use fastvideo_engine::EngineError;
use fastvideo_request::RequestError;

/// An API failure: one HTTP status per variant, and an OpenAI-shaped body.
#[derive(Debug)]
pub enum ApiError {
    /// A request that cannot run as given; `param` names the field.
    BadRequest {
        /// The field at fault (the body's `param`), when there is one.
        param: Option<String>,
        /// The body's `code`: short and stable, for clients to match on.
        code: String,
        /// What is wrong, in words.
        message: String,
    },
    /// 404: no such resource, or one the caller's key does not own.
    NotFound {
        /// What was looked for (a video, file or session, by id); the message adds "not found".
        what: String,
    },
    /// The resource exists but is not in a state for this (content of an unfinished job).
    Conflict {
        /// The body's `code`: short and stable, for clients to match on.
        code: String,
        /// What is wrong, in words.
        message: String,
    },
    /// Too much admitted work; retry later.
    Busy {
        /// The body's `code` (e.g. `queue_full`).
        code: String,
        /// What is full, in words.
        message: String,
    },
    /// Shutting down.
    Unavailable {
        /// Says the server is shutting down.
        message: String,
    },
    /// A failure on our side while running the request.
    Internal {
        /// The body's `code` (e.g. `plugin_failed`).
        code: String,
        /// What failed and where.
        message: String,
    },
    /// The job store is at its disk budget.
    InsufficientStorage {
        /// What the store holds against its budget, and how to free space.
        message: String,
    },
    /// No API key, or one this server does not accept.
    Unauthorized {
        /// Why the key was refused.
        message: String,
    },
    /// Refused below our handlers (a query or path that does not parse, a wrong method, a body
    /// over the limit): the framework's status, with its text as the message.
    Rejected {
        /// The status the framework chose.
        status: StatusCode,
        /// The framework's text.
        message: String,
    },
}

impl ApiError {
    /// A 400 for `param` breaking a rule (`code` `invalid_request`).
    pub fn field(param: &str, message: impl Into<String>) -> Self {
        ApiError::BadRequest { param: Some(param.into()), code: "invalid_request".into(), message: message.into() }
    }

    fn parts(&self) -> (StatusCode, &'static str, Option<&str>, &str, String) {
        match self {
            ApiError::BadRequest { param, code, message } => {
                (StatusCode::BAD_REQUEST, "invalid_request_error", param.as_deref(), code, message.clone())
            }
            ApiError::NotFound { what } => {
                (StatusCode::NOT_FOUND, "invalid_request_error", None, "not_found", format!("{what} not found"))
            }
            ApiError::Conflict { code, message } => {
                (StatusCode::CONFLICT, "invalid_request_error", None, code, message.clone())
            }
            ApiError::Busy { code, message } => {
                (StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", None, code, message.clone())
            }
            ApiError::Unavailable { message } => {
                (StatusCode::SERVICE_UNAVAILABLE, "server_error", None, "draining", message.clone())
            }
            ApiError::Internal { code, message } => {
                (StatusCode::INTERNAL_SERVER_ERROR, "server_error", None, code, message.clone())
            }
            ApiError::InsufficientStorage { message } => {
                (StatusCode::INSUFFICIENT_STORAGE, "server_error", None, "insufficient_storage", message.clone())
            }
            ApiError::Unauthorized { message } => {
                (StatusCode::UNAUTHORIZED, "invalid_request_error", None, "invalid_api_key", message.clone())
            }
            ApiError::Rejected { status, message } => {
                let (kind, code) = match *status {
                    StatusCode::METHOD_NOT_ALLOWED => ("invalid_request_error", "method_not_allowed"),
                    StatusCode::PAYLOAD_TOO_LARGE => ("invalid_request_error", "payload_too_large"),
                    StatusCode::UNSUPPORTED_MEDIA_TYPE => ("invalid_request_error", "unsupported_media_type"),
                    StatusCode::NOT_FOUND => ("invalid_request_error", "not_found"),
                    s if s.is_server_error() => ("server_error", "server_error"),
                    _ => ("invalid_request_error", "invalid_request"),
                };
                (*status, kind, None, code, message.clone())
            }
        }
    }

    /// Rewrites an error response that is not JSON (the framework's own rejections answer plain
    /// text or nothing) into this type's body, keeping its status; every other response passes.
    pub async fn json_errors(res: Response) -> Response {
        let status = res.status();
        let is_json = res
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
        if !(status.is_client_error() || status.is_server_error()) || is_json {
            return res;
        }
        // Rejection texts are one line; more than this is not a message worth echoing.
        let text = axum::body::to_bytes(res.into_body(), 4096).await.unwrap_or_default();
        let text = String::from_utf8_lossy(&text).trim().to_string();
        let message = if text.is_empty() { status.canonical_reason().unwrap_or("error").to_string() } else { text };
        ApiError::Rejected { status, message }.into_response()
    }

    /// The JSON body (also sent over WebSocket).
    pub fn body(&self) -> serde_json::Value {
        let (_, kind, param, code, message) = self.parts();
        serde_json::json!({"error": {"message": message, "type": kind, "param": param, "code": code}})
    }
}

impl From<RequestError> for ApiError {
    fn from(e: RequestError) -> Self {
        // The API's fields are flat (`num_frames`), the engine's are grouped (`diffusion.num_frames`).
        let param = ["diffusion.", "sampling.", "outputs."]
            .iter()
            .find_map(|p| e.field.strip_prefix(p))
            .unwrap_or(&e.field)
            .to_string();
        ApiError::BadRequest {
            message: format!("{param}: {}", e.rule),
            param: Some(param),
            code: "invalid_request".into(),
        }
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Invalid(r) => r.into(),
            EngineError::TooLarge { .. } | EngineError::Duplicate(_) => ApiError::BadRequest {
                param: e.field().map(str::to_string),
                code: e.code().to_string(),
                message: e.to_string(),
            },
            EngineError::QueueFull { .. } | EngineError::SessionsFull { .. } => {
                ApiError::Busy { code: e.code().to_string(), message: e.to_string() }
            }
            EngineError::NoSession(id) => ApiError::NotFound { what: format!("session `{id}`") },
            EngineError::WeightsRefused(_) => {
                ApiError::BadRequest { param: Some("path".into()), code: e.code().to_string(), message: e.to_string() }
            }
            EngineError::NoWeightUpdates(_) => {
                ApiError::BadRequest { param: None, code: e.code().to_string(), message: e.to_string() }
            }
            EngineError::NoSessions => {
                ApiError::BadRequest { param: Some("model".into()), code: e.code().to_string(), message: e.to_string() }
            }
            EngineError::Draining | EngineError::Stopped => ApiError::Unavailable { message: e.to_string() },
            EngineError::Cancelled => ApiError::Conflict { code: "cancelled".into(), message: e.to_string() },
            EngineError::Failed { code, message } => ApiError::Internal { code, message },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.parts().0;
        let mut res = (status, Json(self.body())).into_response();
        if status == StatusCode::UNAUTHORIZED {
            res.headers_mut().insert(axum::http::header::WWW_AUTHENTICATE, "Bearer".parse().expect("a valid header"));
        }
        res
    }
}
