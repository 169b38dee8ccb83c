//! One job as the registry holds it: the client-facing record plus what only the server needs
//! (its MP4, event history and broadcast, owner, and the request to run again after a restart).

use std::path::PathBuf;
use std::sync::Arc;

use fastvideo_request::{OmniEvent, OmniRequest};
use tokio::sync::broadcast;

use crate::auth::Caller;
use crate::job::{now_secs, VideoObject};
use crate::store::Record;

/// A finished job's MP4: in memory, or a file of the store.
#[derive(Clone)]
pub enum Mp4 {
    Memory(Arc<Vec<u8>>),
    Stored(PathBuf),
}

impl Mp4 {
    pub async fn bytes(&self) -> std::io::Result<Vec<u8>> {
        match self {
            Mp4::Memory(b) => Ok(b.as_ref().clone()),
            Mp4::Stored(p) => tokio::fs::read(p).await,
        }
    }
}

/// One job in the registry.
pub(super) struct Job {
    pub(super) video: VideoObject,
    /// Creation order, for listing.
    pub(super) seq: u64,
    pub(super) mp4: Option<Mp4>,
    pub(super) mp4_bytes: u64,
    /// Events so far. Once a stored job ends they move to the store (memory stays flat).
    pub(super) history: Vec<OmniEvent>,
    pub(super) history_stored: bool,
    /// The engine's `Done`, held back until the MP4 is stored so a client that sees `done`
    /// can fetch the content at once.
    pub(super) held_done: Option<OmniEvent>,
    pub(super) tx: broadcast::Sender<OmniEvent>,
    /// Deleted while still running: invisible to clients, kept until its follower ends so
    /// current subscribers still see the final `error` event.
    pub(super) deleted: bool,
    /// The API key that created it: the only one that sees it.
    pub(super) owner: Caller,
    pub(super) owner_tag: Option<String>,
    pub(super) request: Option<OmniRequest>,
}

impl Job {
    pub(super) fn new(
        video: VideoObject,
        seq: u64,
        owner: Caller,
        owner_tag: Option<String>,
        request: Option<OmniRequest>,
    ) -> Self {
        let (tx, _) = broadcast::channel(1024);
        Job {
            video,
            seq,
            mp4: None,
            mp4_bytes: 0,
            history: Vec::new(),
            history_stored: false,
            held_done: None,
            tx,
            deleted: false,
            owner,
            owner_tag,
            request,
        }
    }

    pub(super) fn expired(&self, now: u64) -> bool {
        self.video.expires_at.is_some_and(|e| now >= e)
    }

    pub(super) fn visible_to(&self, who: Caller) -> bool {
        !self.deleted && self.owner == who && !self.expired(now_secs())
    }

    /// The events now live in the store; subscribers read them there.
    pub(super) fn history_to_store(&mut self) {
        self.history = Vec::new();
        self.history_stored = true;
    }

    pub(super) fn record(&self) -> Record {
        Record {
            video: self.video.clone(),
            seq: self.seq,
            owner: self.owner_tag.clone(),
            request: self.request.clone(),
            mp4_bytes: (self.mp4_bytes > 0).then_some(self.mp4_bytes),
        }
    }
}
