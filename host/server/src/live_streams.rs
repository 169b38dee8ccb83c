//! The live streams of causal jobs: each job's fragmented MP4 as it grows, for the clients that
//! follow it while the world model rolls it out.

use std::collections::HashMap;
use std::sync::Mutex;

use axum::body::{Body, Bytes};
use tokio::sync::watch;

/// A causal job's fragmented MP4 so far: the init segment and one fragment per chunk, and
/// whether more will come.
#[derive(Default)]
pub struct Fragments {
    pub(crate) parts: Vec<Bytes>,
    pub(crate) ended: bool,
}

/// The live streams of causal jobs, by job id (kept while the job is).
#[derive(Default)]
pub struct LiveStreams(Mutex<HashMap<String, watch::Sender<Fragments>>>);

impl LiveStreams {
    pub(crate) fn open(&self, id: &str) -> watch::Sender<Fragments> {
        let (tx, _) = watch::channel(Fragments::default());
        self.0.lock().unwrap().insert(id.to_string(), tx.clone());
        tx
    }

    /// The job's stream as a body: what is there, then each fragment as it comes, until the end.
    pub fn body(&self, id: &str) -> Option<Body> {
        let rx = self.0.lock().unwrap().get(id)?.subscribe();
        let stream = futures_util::stream::unfold((rx, 0usize), |(mut rx, sent)| async move {
            loop {
                let (next, ended) = {
                    let f = rx.borrow_and_update();
                    (f.parts.get(sent).cloned(), f.ended && sent >= f.parts.len())
                };
                if let Some(b) = next {
                    return Some((Ok::<_, std::convert::Infallible>(b), (rx, sent + 1)));
                }
                if ended || rx.changed().await.is_err() {
                    return None;
                }
            }
        });
        Some(Body::from_stream(stream))
    }

    /// Drops a job's stream (the job was deleted or expired).
    pub fn forget(&self, id: &str) {
        self.0.lock().unwrap().remove(id);
    }
}
