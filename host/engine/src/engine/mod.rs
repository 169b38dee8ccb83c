//! The async front ([`Engine`]) and the executor thread behind it.
//!
//! Callers on any thread or task `submit` requests; admission (limits, plugin parameters,
//! predicted memory and time, queue room) happens right there, so a refused request costs
//! nothing and never reaches the executor. Admitted requests travel over a channel to one
//! executor thread that owns every tensor: it asks the scheduler [`State`](crate::scheduler::State)
//! which request's next unit of work runs, advances that request's
//! [`PipelineRun`](fastvideo_pipeline::PipelineRun) by one unit, feeds the measured time back
//! into the [`CostModel`](crate::cost::CostModel), and repeats. Events stream to each request's
//! handle as they happen; the final output (or error) arrives on a oneshot.
//!
//! One file per part, so each reads alone: the settings (`config`) and the served model
//! (`model`); what the front and the executor share (`shared`) and send each other (`command`);
//! the front itself (`front`) and its admission (`admission`), session (`sessions`, and sessions run as jobs in `session_job`) and
//! weight-swap (`weight_swap`) methods; the executor loop (`executor`) and its batched steps
//! (`batching`). This file only names them, so the arrows between them run one way.

mod adapters;
mod admission;
mod batching;
mod command;
mod config;
mod executor;
mod front;
mod model;
mod residents;
mod session_job;
mod sessions;
mod shared;
mod weight_swap;

pub use admission::Handle;
pub use config::{EngineConfig, DEFAULT_BATCH_TOKENS};
pub use front::{Engine, ModelOffers};
pub use model::{Classifier, EngineModel, RequestCheck, Residency};
