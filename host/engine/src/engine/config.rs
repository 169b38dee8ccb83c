//! The engine's settings: scheduling, admission limits and session pacing.

use std::time::Duration;

use crate::cost::CostConfig;
use crate::scheduler::Policy;

/// Engine settings (`fastvideo serve`'s scheduling and admission flags).
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// How the scheduler picks the next unit of work.
    pub policy: Policy,
    /// Seconds of predicted work forgiven per second a request waits (anti-starvation).
    pub aging: f64,
    /// A request in the system longer than this many times its predicted solo time is overdue:
    /// overdue requests get `overdue_share` of the executor's time while others wait too, which
    /// bounds any request's slowdown ([`State`](crate::scheduler::State)). `f64::INFINITY`: off.
    /// Default 3 and 0.5: below capacity a long job under a stream of short ones finishes within
    /// about 5x its solo time (measured 2.5x at p95, against 4.1x without), and the short ones
    /// lose nothing.
    pub max_stretch: f64,
    /// The executor's share for overdue requests (see `max_stretch`).
    pub overdue_share: f64,
    /// Requests holding state at once.
    pub max_active: usize,
    /// Memory the active requests may hold together; a request predicted to need more than
    /// this alone is refused at admission.
    pub memory_bytes: u64,
    /// Requests admitted (queued or running) at once; more get `queue_full`.
    pub max_queue: usize,
    /// Refuse requests predicted to run longer than this (seconds), if set.
    pub max_request_seconds: Option<f64>,
    /// Most requests whose compatible steps run as one batched call (1 disables batching).
    pub max_batch: usize,
    /// Most tokens one packed step may hold, for loops that pack requests of different sizes
    /// by token count (`LoopStage::batch_tokens`): partners join while the sum stays within it.
    pub max_batch_tokens: u64,
    /// The cost model's priors and memory rule.
    pub cost: CostConfig,
    /// Live world-model sessions at once; more get `sessions_full`.
    pub max_sessions: usize,
    /// A session nobody streams or acts on for this long is closed.
    pub session_idle: Duration,
    /// The share of the executor's recent time that waiting jobs get even when sessions ask for
    /// all of it (more sessions than the machine can keep at their frame rate): without a floor,
    /// jobs would wait until the sessions end. 0 gives sessions absolute priority.
    pub job_floor: f64,
    /// Models whose weights may be on the device at once (`None`: all). Starting work on
    /// another wakes it and first puts the least recently used idle one to sleep.
    pub max_resident_models: Option<usize>,
    /// Bytes the weights of models that can sleep ([`Residency::bytes`](crate::Residency::bytes))
    /// may hold on the device at once (`None`: no bound); the weights that never leave are
    /// not in it (the assembly subtracts them from the operator's budget).
    pub max_resident_bytes: Option<u64>,
}

/// The default token budget of a packed step: about seven 1024² FLUX.2 requests with
/// guidance (4,608 tokens a branch), enough to fill an H100 without a step growing long.
pub const DEFAULT_BATCH_TOKENS: u64 = 65_536;

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            policy: Policy::ShortestRemaining,
            aging: 0.05,
            max_stretch: 3.0,
            overdue_share: 0.5,
            max_active: 16,
            memory_bytes: 8 << 30,
            max_queue: 1024,
            max_request_seconds: None,
            max_batch: 8,
            max_batch_tokens: DEFAULT_BATCH_TOKENS,
            cost: CostConfig::default(),
            max_sessions: 4,
            session_idle: Duration::from_secs(60),
            job_floor: 0.25,
            max_resident_models: None,
            max_resident_bytes: None,
        }
    }
}
