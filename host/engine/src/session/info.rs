//! What a session's stream carries and where a session stands.

use fastvideo_pipeline::session::SessionChunk;
use serde::Serialize;

/// What a session's stream carries.
pub enum SessionEvent {
    Chunk(SessionChunk),
    /// The session ended: closed, expired, or failed (`reason` says which and why).
    Closed {
        reason: String,
    },
}

/// Where a session stands, for `GET /v1/sessions/{id}`.
#[derive(Debug, Clone, Serialize)]
pub struct SessionInfo {
    pub id: String,
    pub chunks: u64,
    pub frames: u64,
    pub last_action_id: u64,
    /// Chunks that were finished later than their deadline.
    pub late_chunks: u64,
}
