use std::any::Any;

use anyhow::Result;
use fastvideo_request::{OmniEvent, ResolvedRequest};
use tch::{Device, Tensor};

use crate::{PluginMeter, StepCtx, Values};

/// What a stage sees of its request: the resolved parameters, the device, and where to send
/// events. Built by the driver per call; stages keep nothing request-specific in `self`.
pub struct NodeCtx<'a> {
    /// The request being run, with every parameter concrete.
    pub request: &'a ResolvedRequest,
    /// This node's name in the spec (the key of its per-node request parameters).
    pub node: &'a str,
    /// Where the run's tensors live.
    pub device: Device,
    /// The run's plugin-time meter, for the policies a loop stage initialises.
    pub meter: &'a PluginMeter,
}

/// A one-shot node: text encode, VAE decode, assemble.
pub trait Stage: Send + Sync {
    /// Does the node's whole work: reads its inputs from `values` and inserts its outputs. An
    /// error fails the request, reported with the node's name.
    fn run(&self, ctx: &NodeCtx, values: &mut Values) -> Result<()>;
}

/// Per-request state of a loop node. The concrete type belongs to the loop stage; the driver
/// only counts steps.
pub struct LoopState {
    /// Steps run so far; the driver increments it after each `step`.
    pub step: u32,
    /// Steps the loop will run; the driver calls `finalize` once `step` reaches it (a step that
    /// reports `done` sets it to the steps run).
    pub total_steps: u32,
    /// The loop stage's own state, read back with [`get_mut`](Self::get_mut).
    pub inner: Box<dyn Any + Send>,
}

impl LoopState {
    /// The stage's own state. A wrong type is a bug in the stage, reported by name.
    pub fn get_mut<T: 'static>(&mut self) -> Result<&mut T> {
        self.inner
            .downcast_mut::<T>()
            .ok_or_else(|| anyhow::anyhow!("loop state is not a {}", std::any::type_name::<T>()))
    }
}

/// What one `step` did.
#[derive(Debug, Default)]
pub struct StepResult {
    /// The loop finished; the driver calls `finalize` next.
    pub done: bool,
    /// Events the step wants streamed (progress is emitted by the driver).
    pub emit: Vec<OmniEvent>,
    /// Model forwards this step ran (for metrics and the cost model).
    pub forwards: u32,
    /// What observers see on step end (for denoising: the guided model output). A handle,
    /// not a copy.
    pub output: Option<Tensor>,
}

/// A node whose work is a loop the runtime iterates: `init` once, `step` until done,
/// `finalize` once. One `step` must be a bounded unit of work (for denoising: one solver step),
/// because the step boundary is where the runtime interleaves, cancels and observes.
pub trait LoopStage: Send + Sync {
    /// Called once per request before the first step: reads inputs from `values` and builds the
    /// request's state, including how many steps it will take.
    fn init(&self, ctx: &NodeCtx, values: &mut Values) -> Result<LoopState>;
    /// Runs one bounded unit of the loop on the request's state.
    fn step(&self, ctx: &NodeCtx, state: &mut LoopState) -> Result<StepResult>;
    /// Called once after the last step: consumes the state and inserts the node's outputs into
    /// `values`.
    fn finalize(&self, ctx: &NodeCtx, state: LoopState, values: &mut Values) -> Result<()>;

    /// Where the next step is in its schedule (observers get it on step start and end).
    fn step_ctx<'a>(&self, ctx: &NodeCtx<'a>, state: &LoopState) -> Option<StepCtx<'a>> {
        let _ = (ctx, state);
        None
    }

    /// Requests whose next steps this stage can run as one batched call return equal keys;
    /// `None` (the default) never batches.
    fn batch_key(&self, ctx: &NodeCtx, state: &LoopState) -> Option<u64> {
        let _ = (ctx, state);
        None
    }

    /// Tokens one step of this request adds to a packed batch (its sequences' lengths, every
    /// guidance branch counted): what the engine's token budget counts. `None` (the default):
    /// the loop does not pack by tokens, and only the request count (`max_batch`) bounds it.
    fn batch_tokens(&self, ctx: &NodeCtx, state: &LoopState) -> Option<u64> {
        let _ = (ctx, state);
        None
    }

    /// One step of each of several requests whose [`batch_key`](Self::batch_key)s are equal.
    /// The default steps them one by one.
    fn step_batch(&self, ctxs: &[NodeCtx], states: &mut [&mut LoopState]) -> Vec<Result<StepResult>> {
        ctxs.iter().zip(states.iter_mut()).map(|(c, s)| self.step(c, s)).collect()
    }
}

/// A request cannot start now because a shared resource is momentarily full (a language model's
/// key/value blocks): the engine puts it back to wait, and tries again once another request
/// ends, instead of failing it. Return it (through `anyhow`) from a loop's `init`.
#[derive(Debug)]
pub struct WaitForRoom(pub String);

impl std::fmt::Display for WaitForRoom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WaitForRoom {}

/// [`LoopStage::step_batch`] for a loop whose request states (all of type `S`) step together as
/// one call, `step` (e.g. one packed forward): each request's result with its `forwards` and
/// its guided output, or the call's error for every request.
pub fn step_packed<S: 'static>(
    states: &mut [&mut LoopState],
    forwards: impl Fn(&S) -> u32,
    step: impl FnOnce(&mut [&mut S]) -> Result<Vec<tch::Tensor>>,
) -> Vec<Result<StepResult>> {
    let mut inner: Vec<&mut S> = Vec::with_capacity(states.len());
    for s in states.iter_mut() {
        match s.get_mut::<S>() {
            Ok(x) => inner.push(x),
            Err(e) => {
                let msg = format!("{e:#}");
                return (0..states.len()).map(|_| Err(anyhow::anyhow!("{msg}"))).collect();
            }
        }
    }
    let counts: Vec<u32> = inner.iter().map(|s| forwards(s)).collect();
    match step(&mut inner) {
        Ok(outputs) => outputs
            .into_iter()
            .zip(counts)
            .map(|(v, forwards)| Ok(StepResult { forwards, output: Some(v), ..Default::default() }))
            .collect(),
        Err(e) => {
            let msg = format!("{e:#}");
            counts.iter().map(|_| Err(anyhow::anyhow!("{msg}"))).collect()
        }
    }
}
