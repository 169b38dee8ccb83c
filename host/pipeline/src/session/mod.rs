//! The model side of a live session (a world model rolled out chunk by chunk as actions
//! arrive). A session is an ordinary request (`task: world`) run by [`PipelineRun`] over the
//! model's session pipeline: one open-ended loop node whose steps are the rollout's units and
//! whose `done` comes when the session is closed. So sessions get the same guiders, step
//! interceptors, observers and `exact` rules as jobs. What a session adds is its
//! [`ActionInbox`]: actions that arrive while the request runs, handed to the loop node as the
//! value [`ACTIONS`].
//!
//! [`PipelineRun`]: crate::PipelineRun

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use fastvideo_request::{ActionPart, RequestError, ResolvedRequest};

use crate::kv_pool::PoolStats;
use crate::PipelineSpec;

pub mod offline;

/// Value name under which a session's [`ActionInbox`] is handed to its loop node.
pub const ACTIONS: &str = "actions";

/// What a client asks for when it opens a session.
#[derive(Debug, Clone, Default)]
pub struct SessionRequest {
    /// Text conditioning; the model's own when `None`.
    pub prompt: Option<String>,
    /// Start from the model's simulator frame for this seed (models that have one), else generate.
    pub start_seed: Option<u64>,
    /// Seed of the session's noise (each chunk draws from it).
    pub seed: u64,
    /// Latent frames of context (at most the model's); the model's when `None`.
    pub window: Option<usize>,
    /// Run as the reference would: plugins that alter the sampled distribution are not called.
    pub exact: bool,
    /// Per-session parameters of the deploy's plugins, by plugin name (as a job's `plugin_params`).
    pub plugin_params: BTreeMap<String, serde_json::Value>,
    /// LoRA adapters the session runs with (as a job's `lora`; the deploy's world adapters).
    pub lora: Vec<fastvideo_request::LoraChoice>,
}

#[derive(Debug, Default)]
struct InboxState {
    actions: VecDeque<ActionPart>,
    closed: bool,
}

/// Actions sent to a running session, and whether it was closed: the one channel into a
/// session's loop node while it runs. Clones share one inbox (the engine writes, the node
/// reads at its step boundaries).
#[derive(Debug, Clone, Default)]
pub struct ActionInbox(Arc<Mutex<InboxState>>);

impl ActionInbox {
    /// Queues an action (checked against the model's keys already).
    pub fn push(&self, action: ActionPart) {
        self.0.lock().unwrap().actions.push_back(action);
    }
    /// Asks the session to end: its next step reports `done`.
    pub fn close(&self) {
        self.0.lock().unwrap().closed = true;
    }
    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.0.lock().unwrap().closed
    }
    /// The actions queued since the last call, oldest first.
    pub fn take(&self) -> Vec<ActionPart> {
        self.0.lock().unwrap().actions.drain(..).collect()
    }
}

/// A model that can run sessions.
pub trait SessionModel: Send + Sync {
    /// The model's name in session listings.
    fn id(&self) -> &str;
    /// The action keys it takes.
    fn actions(&self) -> Vec<String>;
    /// Whether it takes continuous deltas (`ActionPart::delta`) too.
    fn continuous_actions(&self) -> bool {
        false
    }
    /// Frames per second the session plays at.
    fn fps(&self) -> u32;
    /// Video frames per chunk after the first.
    fn frames_per_chunk(&self) -> u32;
    /// `(width, height)` of the frames.
    fn frame_size(&self) -> (u32, u32);
    /// Loop steps per chunk (denoise steps plus the commit pass), for pacing.
    fn units_per_chunk(&self) -> u32;
    /// The pipeline every session runs, built with the deploy's policies.
    fn pipeline(&self) -> Arc<PipelineSpec>;
    /// Checks a session request and makes it the pipeline's request (`task: world`, id `id`);
    /// errors name the field. Cheap: the session's state is made by its loop node's `init`.
    fn request(&self, id: &str, req: &SessionRequest) -> Result<ResolvedRequest, RequestError>;
    /// The key/value pool's occupancy, for the engine's gauges (models without a pool: `None`).
    fn kv_stats(&self) -> Option<PoolStats> {
        None
    }
    /// The LoRA adapters sessions may name (none: a session's `lora` is refused).
    fn adapters(&self) -> Option<&Arc<crate::AdapterCache>> {
        None
    }
    /// How the world model's weights leave the device and come back, when they may (sessions
    /// and causal jobs bring them back first); none: always resident.
    fn residency(&self) -> Option<Arc<dyn crate::Residency>> {
        None
    }
}
