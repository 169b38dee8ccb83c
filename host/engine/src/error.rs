use fastvideo_request::RequestError;
use serde::Serialize;
use thiserror::Error;

/// Everything that can stop a request, from refusal at the door to a failure mid-run. The server
/// maps each variant to exactly one HTTP status (`fastvideo-server`'s `ApiError`).
#[derive(Debug, Clone, Error, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EngineError {
    /// The request is malformed or breaks a model limit; names the field.
    #[error("{0}")]
    Invalid(#[serde(serialize_with = "as_string")] RequestError),
    /// Predicted to need more than the engine can ever give it.
    #[error("{field}: {message}")]
    TooLarge {
        /// The field whose value makes it too large (e.g. `diffusion.num_frames`).
        field: String,
        /// What it would need and what the engine has.
        message: String,
    },
    /// The queue is full; try again later.
    #[error("the queue is full ({queued} requests waiting); retry later")]
    QueueFull {
        /// Requests admitted when it was refused.
        queued: usize,
    },
    /// The engine is draining (shutting down) and admits nothing new.
    #[error("the server is shutting down and accepts no new requests")]
    Draining,
    /// A request with this id is already queued or running.
    #[error("request_id: `{0}` is already in use")]
    Duplicate(String),
    /// Cancelled by the client or by the drain.
    #[error("cancelled")]
    Cancelled,
    /// The request failed while running (a plugin trap, a model error, a panic in a stage);
    /// `code` is short and stable, `message` says what and where.
    #[error("{code}: {message}")]
    Failed {
        /// Short and stable (e.g. `plugin_failed`), for clients and metrics.
        code: String,
        /// What failed and where.
        message: String,
    },
    /// The executor thread is gone.
    #[error("the engine has stopped")]
    Stopped,
    /// This server runs no world model.
    #[error("this server runs no world model (start it with --world)")]
    NoSessions,
    /// No live session has this id (never opened, closed, or expired).
    #[error("session `{0}` is not live")]
    NoSession(String),
    /// The cap on live sessions is reached; try again later.
    #[error("{max} sessions are live, the most this server runs at once; retry later")]
    SessionsFull {
        /// The cap on live sessions (`EngineConfig::max_sessions`).
        max: usize,
    },
    /// New weights did not load (missing file, wrong tensor names or shapes); the old ones keep
    /// serving.
    #[error("{0}")]
    WeightsRefused(String),
    /// The model named takes no weight updates (its family offers none, or it was not enabled).
    #[error("model `{0}` takes no weight updates")]
    NoWeightUpdates(String),
}

fn as_string<S: serde::Serializer>(e: &RequestError, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&e.to_string())
}

impl From<RequestError> for EngineError {
    fn from(e: RequestError) -> Self {
        EngineError::Invalid(e)
    }
}

impl EngineError {
    /// A stable code for JSON error bodies and metrics labels.
    pub fn code(&self) -> &str {
        match self {
            EngineError::Invalid(_) => "invalid_request",
            EngineError::TooLarge { .. } => "request_too_large",
            EngineError::QueueFull { .. } => "queue_full",
            EngineError::Draining => "draining",
            EngineError::Duplicate(_) => "duplicate_request_id",
            EngineError::Cancelled => "cancelled",
            EngineError::Failed { code, .. } => code,
            EngineError::Stopped => "engine_stopped",
            EngineError::NoSessions => "no_world_model",
            EngineError::NoSession(_) => "session_not_found",
            EngineError::SessionsFull { .. } => "sessions_full",
            EngineError::WeightsRefused(_) => "weights_refused",
            EngineError::NoWeightUpdates(_) => "no_weight_updates",
        }
    }

    /// The field a client should fix, when there is one.
    pub fn field(&self) -> Option<&str> {
        match self {
            EngineError::Invalid(e) => Some(&e.field),
            EngineError::TooLarge { field, .. } => Some(field),
            EngineError::Duplicate(_) => Some("request_id"),
            _ => None,
        }
    }
}
