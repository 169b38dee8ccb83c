//! The model side of a live session (a world model rolled out chunk by chunk as actions
//! arrive): what the engine asks of a model that can run sessions. Defined below the engine so
//! model families implement it without depending on the engine; the engine's `session` module
//! paces and runs them.

use fastvideo_request::{ActionPart, RequestError, VideoArtifact};

use crate::kv_pool::PoolStats;

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
}

/// One session's model side; its state (key/value slabs, decoder cache) is dropped with it.
pub trait SessionRun: Send {
    /// Runs one unit; returns the chunk when this unit finished one.
    fn step(&mut self) -> anyhow::Result<Option<SessionChunk>>;
    /// An action (checked against the model's keys already): from its `from_frame`, or the
    /// first chunk not yet committed.
    fn set_action(&mut self, action: &ActionPart);
    /// Units per chunk (denoise steps plus the commit pass), for pacing.
    fn units_per_chunk(&self) -> u32;
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
    /// Opens a session (reserving its key/value slabs); errors name the field.
    fn open(&self, req: &SessionRequest) -> Result<Box<dyn SessionRun>, RequestError>;
    /// The key/value pool's occupancy, for the engine's gauges (models without a pool: `None`).
    fn kv_stats(&self) -> Option<PoolStats> {
        None
    }
}
