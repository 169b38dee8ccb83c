//! The pipeline plane (docs/architecture.md): how a model family's work is laid out and who iterates.
//!
//! The keystone is loop inversion. A family never writes `for t in timesteps { ... }`; it
//! implements [`LoopStage`] (`init` → [`LoopState`], `step`, `finalize`), and a driver outside the
//! model owns the iteration. Today the driver is [`PipelineRun`], which advances one request a
//! unit at a time (a one-shot [`Stage`] or one loop step); the step scheduler drives the same
//! `advance` for many requests, so requests can be interleaved, cancelled at step boundaries,
//! streamed and observed without any model code knowing.
//!
//! A pipeline is a declarative [`PipelineSpec`]: named nodes with the values they read and write,
//! validated once when the pipeline is built. Model-specific behaviour that varies per deploy —
//! classifier-free guidance, for one — is a policy object bound at build time ([`Guidance`]),
//! while its per-request state lives in the request's [`LoopState`].

mod blocks;
pub mod denoise;
mod driver;
mod embedding_cache;
mod guidance;
pub mod kv_pool;
mod policies;
pub mod sampler;
mod spec;
mod stage;
mod value;

pub use blocks::{BlockAction, BlockHook, BlockPolicy, BlockPolicyState, BoundHook};
pub use denoise::{DenoiseLoop, Denoiser};
pub use driver::{Advance, CancelToken, PipelineRun};
pub use embedding_cache::{CacheObserver, EmbeddingCache};
pub use guidance::{ClassicCfg, Guidance, GuidancePlan, GuidanceState, StepCtx};
pub use policies::{LoopPolicies, Observed, Observer, ObserverState, PluginMeter, StepPolicy, StepPolicyState};
pub use spec::{Node, NodeKind, PipelineSpec, SpecError};
pub use stage::{LoopStage, LoopState, NodeCtx, Stage, StepResult};
pub use value::{Value, Values};
