//! The server's hold on live sessions' streams until a client takes them, and who opened each
//! session. Apart from the session handlers so the server's state can hold it without them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use fastvideo_engine::session::SessionEvent;
use tokio::sync::mpsc;

use crate::auth::Caller;

/// Streams not yet taken by a client, and who opened each session.
#[derive(Clone, Default)]
pub struct SessionStreams {
    /// Streams not yet taken by a WebSocket or WebRTC client, by session id.
    pub(crate) untaken: Arc<Mutex<HashMap<String, mpsc::Receiver<SessionEvent>>>>,
    /// The caller that opened each session (another key sees it as not there).
    pub(crate) owners: Arc<Mutex<HashMap<String, Caller>>>,
}

impl SessionStreams {
    /// Returns a stream taken for a client that then failed to connect.
    pub(crate) fn put_back(&self, id: &str, rx: mpsc::Receiver<SessionEvent>) {
        self.untaken.lock().unwrap().insert(id.to_string(), rx);
    }
}
