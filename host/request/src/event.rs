use serde::{Deserialize, Serialize};

use crate::RequestMetrics;

/// What a request streams while it runs. Serialized with a `type` tag, one JSON object per SSE
/// event or WebSocket message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OmniEvent {
    /// A pipeline node started.
    NodeStarted { request_id: String, node: String },
    /// One denoise step finished (`step` counts from 1).
    Progress { request_id: String, node: String, step: u32, total_steps: u32 },
    /// A decoded preview of the current estimate (PNG bytes, base64 in JSON).
    Preview { request_id: String, step: u32, png_b64: String },
    /// An event a plugin emitted (observers such as NaNWatch and Profiler). `payload` is the
    /// plugin's JSON (a string when the plugin sent something that is not JSON).
    Plugin { request_id: String, plugin: String, name: String, payload: serde_json::Value },
    /// An artifact is ready (the bytes travel separately).
    Artifact { request_id: String, name: String },
    /// The request failed; no `Done` follows.
    Error { request_id: String, code: String, message: String },
    /// The request finished.
    Done { request_id: String, metrics: RequestMetrics },
}

impl OmniEvent {
    pub fn request_id(&self) -> &str {
        match self {
            OmniEvent::NodeStarted { request_id, .. }
            | OmniEvent::Progress { request_id, .. }
            | OmniEvent::Preview { request_id, .. }
            | OmniEvent::Plugin { request_id, .. }
            | OmniEvent::Artifact { request_id, .. }
            | OmniEvent::Error { request_id, .. }
            | OmniEvent::Done { request_id, .. } => request_id,
        }
    }
}
