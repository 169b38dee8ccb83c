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
//!
//! # Example
//!
//! A two-node pipeline on the CPU: a one-shot stage writes `x`, and a loop stage doubles it once
//! per requested step. The driver, not the stage, runs the loop; asking for the result as the
//! `latents` artifact reads it back.
//!
//! ```rust
//! use std::sync::Arc;
//!
//! use fastvideo_pipeline::{
//!     CancelToken, LoopStage, LoopState, Node, NodeCtx, PipelineRun, PipelineSpec, Stage, StepResult, Value, Values,
//! };
//! use fastvideo_request::{Artifact, ModelLimits, OmniRequest, TaskType};
//! use tch::{Device, Tensor};
//!
//! struct Start;
//! impl Stage for Start {
//!     fn run(&self, _ctx: &NodeCtx, values: &mut Values) -> anyhow::Result<()> {
//!         values.insert("x", Value::Tensor(Tensor::from_slice(&[1f32])));
//!         Ok(())
//!     }
//! }
//!
//! struct Double;
//! impl LoopStage for Double {
//!     fn init(&self, ctx: &NodeCtx, values: &mut Values) -> anyhow::Result<LoopState> {
//!         let x = values.tensor("x")?.shallow_clone();
//!         Ok(LoopState { step: 0, total_steps: ctx.request.steps, inner: Box::new(x) })
//!     }
//!     fn step(&self, _ctx: &NodeCtx, state: &mut LoopState) -> anyhow::Result<StepResult> {
//!         let x: &mut Tensor = state.get_mut()?;
//!         *x = &*x * 2.0;
//!         Ok(StepResult::default())
//!     }
//!     fn finalize(&self, _ctx: &NodeCtx, mut state: LoopState, values: &mut Values) -> anyhow::Result<()> {
//!         let x: &mut Tensor = state.get_mut()?;
//!         values.insert("y", Value::Tensor(x.shallow_clone()));
//!         Ok(())
//!     }
//! }
//!
//! # fn main() -> anyhow::Result<()> {
//! let nodes = vec![
//!     Node::stage("start", Arc::new(Start), &[], &["x"]),
//!     Node::looped("double", Arc::new(Double), &["x"], &["y"]),
//! ];
//! let mut spec = PipelineSpec::new("doubler", vec![TaskType::T2v], nodes, &[], "y")?;
//! spec.latents = "y".into();
//!
//! let mut req = OmniRequest::text_to_video("req-1", "a red circle").resolve(&ModelLimits::example(), || 7)?;
//! req.steps = 3;
//! req.outputs.return_latents = true;
//!
//! let mut run = PipelineRun::new(Arc::new(spec), req, Device::Cpu, Values::default(), CancelToken::default());
//! run.run_to_end(&mut |_event| {})?;
//! let out = run.finish(&mut |_event| {})?;
//!
//! let Some(Artifact::Latents(y)) = out.artifacts.get("latents") else { panic!("no latents artifact") };
//! assert_eq!(y.data, [8.0]); // 1 doubled three times
//! assert_eq!(out.metrics.step_seconds.len(), 3);
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]

mod adapter_cache;
mod adapters;
mod blocks;
pub mod denoise;
mod driver;
mod embedding_cache;
mod experts;
mod frames;
mod guidance;
pub mod kv_pool;
mod meter;
mod noise;
pub mod packed;
mod policies;
pub mod sampler;
pub mod session;
mod spec;
mod stage;
mod stream_guidance;
pub mod token;
mod value;
mod weight_loader;

/// The value holding a request's extended prompt (`prompt_extend`): text stages read it in
/// place of the request's prompt, and the request's output records it.
pub const EXTENDED_PROMPT: &str = "extended_prompt";
/// The value a family that makes sound leaves its waveform under (a [`Value::Audio`], decoded
/// by its audio decoder); the run returns it as the `audio` artifact when the request resolved
/// `generate_sound`, and the MP4 writers mux it.
pub const AUDIO: &str = "audio";

/// The value an action model leaves its predicted actions under (a tensor `[steps, width]`);
/// the run returns it as the `action` artifact.
pub const ACTIONS: &str = "action";
/// The prompt rewriter's decode node: a request's rewriter sampling goes in
/// `node_params.prompt_extend`, whichever family's language model rewrites.
pub const EXTEND_NODE: &str = "prompt_extend";

pub use adapter_cache::{AdapterCache, AdapterEvent, AdapterSource, AdapterTarget, DEFAULT_MAX_LORAS_PER_REQUEST};
pub use adapters::{AdapterRows, AdapterSet, ModuleDelta, PreparedAdapter, ADAPTERS};
pub use blocks::{BlockAction, BlockHook, BlockPolicy, BlockPolicyState, BoundHook};
pub use denoise::{ChannelCondition, Conditioning, DenoiseLoop, Denoiser, LatentCondition, LatentPreview};
pub use driver::{Advance, CancelToken, PipelineRun};
pub use embedding_cache::{CacheObserver, EmbeddingCache};
pub use experts::{ExpertRouting, ExpertRoutingState, OrModelRule, Route};
pub use frames::{frames_to_video, AssembleVideo};
pub use guidance::{ClassicCfg, Guidance, GuidancePlan, GuidanceState, StepCtx};
pub use meter::PluginMeter;
pub use policies::{LoopPolicies, Observed, Observer, ObserverState, Reward, RewardInput, StepPolicy, StepPolicyState};
pub use spec::{Node, NodeKind, NodeParams, PipelineSpec, Residency, SpecError, WorkCount};
pub use stage::{step_packed, LoopStage, LoopState, NodeCtx, Stage, StepResult, WaitForRoom};
pub use stream_guidance::{StreamGuidance, StreamPreds, STREAM_BRANCHES};
pub use value::{Value, Values};
pub use weight_loader::WeightLoader;
