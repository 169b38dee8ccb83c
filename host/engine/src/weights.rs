//! Live weight updates (RL): a new pipeline replaces the one new requests start on, between
//! units of work, atomically.
//!
//! The model family builds the new pipeline (a [`WeightLoader`]) off the executor thread; only
//! the swap itself runs on it. A request keeps the pipeline — so the weights and the epoch — it
//! started its first unit on: in-flight requests finish on the old epoch (their pipeline, and
//! with it the old weights, is freed when the last of them ends), queued ones run on the new.
//! A load that fails swaps nothing: the old weights keep serving.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

pub use fastvideo_pipeline::WeightLoader;
use serde::Serialize;

/// Which weights new requests run on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WeightsInfo {
    /// 0 for the weights loaded at start, one more per update.
    pub epoch: u64,
    /// blake3 of the transformer's checkpoint bytes (every shard, in order), hex.
    pub hash: String,
    /// Where they were loaded from.
    pub source: PathBuf,
    /// When they started serving, in seconds since the Unix epoch.
    pub since: u64,
}

impl WeightsInfo {
    pub(crate) fn new(epoch: u64, hash: String, source: PathBuf) -> Self {
        let since = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        Self { epoch, hash, source, since }
    }
}

/// What an engine needs to take weight updates: the loader, and where the start weights came from.
#[derive(Clone)]
pub struct WeightUpdates {
    /// Builds a pipeline from new weights (the model family's loader).
    pub loader: Arc<dyn WeightLoader>,
    /// The checkpoint the engine's first pipeline was built from (epoch 0).
    pub initial: PathBuf,
}
