//! The execution plane (docs/architecture.md): an async engine in front of one executor thread that
//! runs a step scheduler over every admitted request.
//!
//! - [`scheduler::State`]: which request's next unit of work (one denoise step, or one whole
//!   one-shot stage) runs; plain data, unit-tested without a GPU.
//! - [`cost::CostModel`]: predicted seconds and bytes per request, calibrated from measured step
//!   times; used for admission and for the scheduler's "least remaining work" order.
//! - [`Engine`]: `submit` → [`Handle`] (events + final output), `cancel`, `drain`; and live
//!   world-model sessions (`open_session`, `session_action`, `close_session`), whose units the
//!   executor interleaves with jobs under a per-chunk deadline: the sessions' pacing
//!   ([`scheduler::Deadlines`], [`scheduler::Pacer`]) is a policy of the same scheduler `State`
//!   that picks jobs.
//!
//! Model code never appears here: the engine drives [`fastvideo_pipeline::PipelineRun`]s.

#![deny(missing_docs)]

pub mod chat;
pub mod cost;
mod engine;
mod error;
mod metrics;
pub mod rollout;
pub mod scheduler;
pub mod session;
pub mod share;
mod weights;

pub use cost::CostConfig;
pub use engine::{
    Classifier, Engine, EngineConfig, EngineModel, Handle, ModelOffers, RequestCheck, Residency, DEFAULT_BATCH_TOKENS,
};
pub use error::EngineError;
pub use metrics::Metrics;
pub use rollout::{Rollout, RolloutFailure, RolloutRequest, RolloutSample};
pub use scheduler::Policy;
pub use weights::{WeightLoader, WeightUpdates, WeightsInfo};
