use serde::{Deserialize, Serialize};

use crate::{RequestMetrics, VideoArtifact};

/// What a request streams while it runs. Serialized with a `type` tag, one JSON object per SSE
/// event or WebSocket message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OmniEvent {
    /// A pipeline node started.
    NodeStarted {
        /// The request this event belongs to.
        request_id: String,
        /// Name of the pipeline node, as in the pipeline spec.
        node: String,
    },
    /// One denoise step finished (`step` counts from 1).
    Progress {
        /// The request this event belongs to.
        request_id: String,
        /// Name of the loop node that ran the step (e.g. `denoise`).
        node: String,
        /// Steps finished so far, counting from 1.
        step: u32,
        /// Steps the loop will run in all.
        total_steps: u32,
    },
    /// A small picture of the current estimate of the clean video (its last latent frame), every
    /// `outputs.preview_every` denoise steps.
    Preview {
        /// The request this event belongs to.
        request_id: String,
        /// Denoise steps finished when it was made, counting from 1.
        step: u32,
        /// Pixels across (the latent frame's width).
        width: u32,
        /// Pixels down.
        height: u32,
        /// The JPEG image, base64-encoded.
        jpeg_b64: String,
    },
    /// An event a plugin emitted (observers such as NaNWatch and Profiler). `payload` is the
    /// plugin's JSON (a string when the plugin sent something that is not JSON).
    Plugin {
        /// The request this event belongs to.
        request_id: String,
        /// Name of the plugin that emitted it.
        plugin: String,
        /// The event's name, chosen by the plugin.
        name: String,
        /// The plugin's data: parsed JSON, or a JSON string holding the raw text.
        payload: serde_json::Value,
    },
    /// An artifact is ready (the bytes travel separately).
    Artifact {
        /// The request this event belongs to.
        request_id: String,
        /// The artifact's key in [`OmniOutput::artifacts`](crate::OmniOutput::artifacts), e.g. `video`.
        name: String,
    },
    /// A reward plugin scored the finished video (before `Done`).
    Reward {
        /// The request this event belongs to.
        request_id: String,
        /// The reward plugin's name in the deploy.
        name: String,
        /// Its score.
        value: f32,
    },
    /// The request failed; no `Done` follows.
    Error {
        /// The request this event belongs to.
        request_id: String,
        /// Short machine-readable reason, e.g. `encode_failed`.
        code: String,
        /// Human-readable description of the failure.
        message: String,
    },
    /// A world session finished a chunk of video (its frames travel in `video`, which is not
    /// serialized: streams send them as frames).
    Chunk {
        /// The request (session) this event belongs to.
        request_id: String,
        /// The chunk's index in the session (0: the first frame).
        index: u64,
        /// Index of the chunk's first video frame in the session (shown at `first_frame / fps`).
        first_frame: u64,
        /// The caller's id of the action the chunk was generated under (0: none yet).
        action_id: u64,
        /// The chunk's frames.
        video: VideoArtifact,
    },
    /// A decode loop chose a token (`index` counts the request's generated tokens from 0).
    Token {
        /// The request this event belongs to.
        request_id: String,
        /// Name of the loop node (e.g. `ar_decode`).
        node: String,
        /// Which generated token this is, from 0.
        index: u32,
        /// The token id in the language model's vocabulary (front ends detokenize).
        token: i64,
    },
    /// The request finished.
    Done {
        /// The request this event belongs to.
        request_id: String,
        /// Timings and counts for the whole request.
        metrics: RequestMetrics,
    },
}

impl OmniEvent {
    /// The id of the request this event belongs to, whatever the variant.
    pub fn request_id(&self) -> &str {
        match self {
            OmniEvent::NodeStarted { request_id, .. }
            | OmniEvent::Progress { request_id, .. }
            | OmniEvent::Preview { request_id, .. }
            | OmniEvent::Plugin { request_id, .. }
            | OmniEvent::Artifact { request_id, .. }
            | OmniEvent::Reward { request_id, .. }
            | OmniEvent::Error { request_id, .. }
            | OmniEvent::Chunk { request_id, .. }
            | OmniEvent::Token { request_id, .. }
            | OmniEvent::Done { request_id, .. } => request_id,
        }
    }
}
