//! Step interceptors and observers, and the bundle of every policy a deploy binds into a
//! pipeline. Like guidance and block policies, each is an object shared by all requests that
//! hands out per-request state from `init`; none bound costs nothing in the loop.

use std::sync::Arc;

use anyhow::Result;
use fastvideo_request::{OmniEvent, ResolvedRequest};
use tch::Tensor;

use crate::blocks::BlockPolicy;
use crate::experts::ExpertRouting;
use crate::guidance::{Guidance, StepCtx};
use crate::meter::PluginMeter;

/// Around every solver step: may supply the step's model output (so no forward runs) and sees
/// the output the sampler used. Step caches such as TaylorSeer are written against this.
pub trait StepPolicy: Send + Sync {
    /// Called once per request when its denoise loop starts; an error fails that request only.
    fn init(&self, req: &ResolvedRequest, meter: &PluginMeter) -> Result<Box<dyn StepPolicyState>>;
}

/// A request's step-interceptor state.
pub trait StepPolicyState: Send {
    /// `Some(output)` is used as the step's guided model output and the forwards are skipped;
    /// it must have the latents' shape.
    fn before_step(&mut self, step: &StepCtx, latents: &Tensor) -> Result<Option<Tensor>>;
    /// The guided model output the sampler used this step (computed or supplied).
    fn after_step(&mut self, step: &StepCtx, output: &Tensor) -> Result<()>;
    /// Events for the request's stream (a plugin's `events.emit`), collected after each step.
    fn take_events(&mut self) -> Vec<OmniEvent> {
        Vec::new()
    }
}

/// What an observer sees of a request's life, in order: request start, then per node start/end
/// (with step start/end inside loop nodes), artifacts, request end.
#[derive(Debug, Clone, Copy)]
pub enum Observed<'a> {
    /// Before the first node runs.
    RequestStart,
    /// Before the named node's work (for a loop node: before its `init`).
    NodeStart(&'a str),
    /// After the named node's work (for a loop node: after its `finalize`).
    NodeEnd(&'a str),
    /// Before a loop step; an observer error here fails the request before the step runs.
    StepStart(&'a StepCtx<'a>),
    /// Comes with the step's guided model output.
    StepEnd(&'a StepCtx<'a>),
    /// The named artifact was collected by [`PipelineRun::finish`](crate::PipelineRun::finish).
    Artifact(&'a str),
    /// `completed`, `failed` or `cancelled`.
    RequestEnd(&'a str),
}

/// A read-only watcher of requests (NaN watchdogs, profilers). Observers are driven by the
/// pipeline driver, so they see every node, not only the loop.
pub trait Observer: Send + Sync {
    /// Called once per request on its first `advance`; an error fails that request only.
    fn init(&self, req: &ResolvedRequest, meter: &PluginMeter) -> Result<Box<dyn ObserverState>>;
}

/// A request's observer state. `emit` puts events into the request's stream (SSE, WebSocket).
pub trait ObserverState: Send {
    /// Sees one event; `output` is set only for [`Observed::StepEnd`]. An error fails the request.
    fn on_event(&mut self, event: Observed, output: Option<&Tensor>, emit: &mut dyn FnMut(OmniEvent)) -> Result<()>;
}

/// Everything a deploy binds into a pipeline: the guidance policy (required), and optionally a
/// block policy, a step interceptor and any number of observers.
#[derive(Clone)]
pub struct LoopPolicies {
    /// How branch predictions are combined each step.
    pub guidance: Arc<dyn Guidance>,
    /// How a model that denoises several streams (LTX-2) combines them each step, when the
    /// deploy binds a stream guider; the model's own rule otherwise. One-stream models ignore it.
    pub stream_guidance: Option<Arc<dyn crate::StreamGuidance>>,
    /// A block cache hooked into each forward, if any.
    pub blocks: Option<Arc<dyn BlockPolicy>>,
    /// A step interceptor (step cache) around each solver step, if any.
    pub steps: Option<Arc<dyn StepPolicy>>,
    /// Watchers of every request through the pipeline.
    pub observers: Vec<Arc<dyn Observer>>,
    /// Scorers of finished videos that requests may name.
    pub rewards: Vec<Arc<dyn Reward>>,
    /// The expert routing of a two-expert model (a plugin's), if the deploy binds one; the
    /// model's own rule otherwise. Models with one expert ignore it.
    pub routing: Option<Arc<dyn ExpertRouting>>,
    /// Nodes run before the text encoder, each gated on what the request asks: the prompt
    /// extension (`prompt_extend`), when the model has a rewriter.
    pub text_stages: Vec<crate::Node>,
}

impl LoopPolicies {
    /// Only a guidance policy (no caches, no observers, no rewards).
    pub fn new(guidance: Arc<dyn Guidance>) -> Self {
        Self {
            guidance,
            stream_guidance: None,
            blocks: None,
            steps: None,
            observers: Vec::new(),
            rewards: Vec::new(),
            routing: None,
            text_stages: Vec::new(),
        }
    }
}

/// What a [`Reward`] scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RewardInput {
    /// The decoded video, `[frames, height, width, 3]` float in `[0, 1]`.
    Video,
    /// The final latents (the spec's `latents` value, e.g. `[1, C, F, H, W]`), as float32.
    Latents,
}

/// Scores a finished request (RL rollouts, best-of-n): runs once, after the pipeline's last
/// node, for requests that name it in `outputs.rewards`.
pub trait Reward: Send + Sync {
    /// The name requests use for it (the plugin's deploy name).
    fn name(&self) -> &str;
    /// What it scores; the decoded video unless it says otherwise.
    fn input(&self) -> RewardInput {
        RewardInput::Video
    }
    /// Scores the request's [`input`](Self::input), on the run's device. An error fails the
    /// request.
    fn score(&self, req: &ResolvedRequest, meter: &PluginMeter, input: &Tensor) -> Result<f32>;
}
