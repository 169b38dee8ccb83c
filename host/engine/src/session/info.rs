//! What a session's stream carries and where a session stands.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use fastvideo_request::{OmniEvent, VideoArtifact};
use serde::Serialize;

/// A session's chunks sent on its stream and not yet dropped by the reader: chunks, not the
/// plugin events between them, are what a slow viewer must not pile up.
#[derive(Clone, Default)]
pub(crate) struct Unread(Arc<AtomicUsize>);

impl Unread {
    pub(crate) fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
    /// Counts one more chunk until the returned hold is dropped (with its chunk).
    pub(crate) fn hold(&self) -> ChunkHold {
        self.0.fetch_add(1, Ordering::SeqCst);
        ChunkHold(self.0.clone())
    }
}

/// Held by a chunk on its way to the reader; dropping the chunk frees its place.
pub struct ChunkHold(Arc<AtomicUsize>);

impl Drop for ChunkHold {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A finished chunk of a session.
pub struct SessionChunk {
    /// The chunk's index in the session (0: the first frame).
    pub index: u64,
    /// Index of the chunk's first video frame in the session (its presentation time is
    /// `first_frame / fps`).
    pub first_frame: u64,
    /// The chunk's frames.
    pub video: VideoArtifact,
    /// The caller's id of the action the chunk was generated under (0: none yet).
    pub action_id: u64,
    /// Its place among the session's unread chunks.
    pub(crate) _hold: ChunkHold,
}

/// What a session's stream carries.
pub enum SessionEvent {
    /// A generated chunk of video.
    Chunk(SessionChunk),
    /// An event of the session's plugins (observers, step interceptors): `OmniEvent::Plugin`.
    Plugin(OmniEvent),
    /// The session ended: closed, expired, or failed (`reason` says which and why). Plugin
    /// events of its end (an observer's summary) come before it.
    Closed {
        /// Why it ended, in words.
        reason: String,
    },
}

/// Where a session stands, for `GET /v1/sessions/{id}`.
#[derive(Debug, Clone, Serialize)]
pub struct SessionInfo {
    /// The session's id.
    pub id: String,
    /// Chunks generated so far.
    pub chunks: u64,
    /// Video frames generated so far.
    pub frames: u64,
    /// The caller's id of the action the last chunk was generated under (0: none yet).
    pub last_action_id: u64,
    /// Chunks that were finished later than their deadline.
    pub late_chunks: u64,
}
