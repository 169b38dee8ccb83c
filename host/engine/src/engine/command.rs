//! What the front sends the executor: commands over one channel, and an admitted request
//! ([`Job`]) as it travels and as the executor keeps it until it ends.

use std::sync::Arc;
use std::time::Instant;

use fastvideo_pipeline::{AdapterSet, CancelToken, PipelineRun, PipelineSpec};
use fastvideo_request::{OmniEvent, OmniOutput, ResolvedRequest};
use tokio::sync::{mpsc, oneshot};

use crate::cost::CostKey;
use crate::session::SessionCommand;
use crate::EngineError;

pub(super) enum Command {
    Submit(Box<Job>),
    Cancel(String),
    CancelAll,
    Session(SessionCommand),
    /// New requests for model `.0` start on this pipeline from now on.
    Swap(usize, Arc<PipelineSpec>, oneshot::Sender<()>),
    /// Puts model `model`'s weights to sleep (`false`) or wakes them (`true`); answers whether
    /// it is resident after, or why not.
    Residency {
        model: usize,
        resident: bool,
        done: oneshot::Sender<Result<bool, String>>,
    },
}

pub(super) struct Job {
    pub(super) id: String,
    /// Which of the engine's models runs it (0: the primary).
    pub(super) model: usize,
    pub(super) req: Option<ResolvedRequest>,
    pub(super) run: Option<PipelineRun>,
    /// The request again, kept while it runs, to start over if it has to wait for room.
    pub(super) restart: Option<ResolvedRequest>,
    pub(super) key: CostKey,
    /// Admission's prediction, handed to the scheduler as is.
    pub(super) predicted: f64,
    pub(super) memory: u64,
    pub(super) steps_left: u32,
    pub(super) one_shot_spent: f64,
    pub(super) submitted: Instant,
    pub(super) cancel: CancelToken,
    /// The request's LoRA adapters, prepared at admission.
    pub(super) adapters: Option<Arc<AdapterSet>>,
    pub(super) events: mpsc::UnboundedSender<OmniEvent>,
    pub(super) done: Option<oneshot::Sender<Result<OmniOutput, EngineError>>>,
    pub(super) span: tracing::Span,
}
