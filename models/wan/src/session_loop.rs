//! A world session as a loop node: [`SessionLoop`] runs a [`ChunkRollout`] one unit per step
//! (a denoise step or a commit pass) for a `task: world` request, open-ended until the session's
//! inbox is closed, and streams each finished chunk as an [`OmniEvent::Chunk`]. Its denoise
//! steps go through the deploy's guider and step interceptor with per-session state, and the
//! driver shows them to observers, exactly as a job's denoise loop does.

use std::sync::Arc;

use anyhow::{bail, Context, Result};
use fastvideo_pipeline::kv_pool::KvPool;
use fastvideo_pipeline::session::{ActionInbox, ACTIONS};
use fastvideo_pipeline::{
    Guidance, GuidanceState, LoopPolicies, LoopStage, LoopState, Node, NodeCtx, PipelineSpec, StepCtx, StepPolicy,
    StepPolicyState, StepResult, Value, Values,
};
use fastvideo_request::{ActionPart, OmniEvent, ResolvedRequest, TaskType};
use tch::Tensor;

use crate::chunk_rollout::{ChunkGuide, ChunkRollout, DenoiseAt, Unit};
use crate::world::WorldModel;

/// Name of the session pipeline's loop node (its `node_params` hold `window` and `start_seed`).
pub const NODE: &str = "rollout";
/// What the loop leaves when the session ends: the number of chunks it made.
pub const CHUNKS: &str = "chunks";

/// Makes a session's first frame from a seed (`[1, 3, 1, H, W]` in [-1, 1]), for models whose
/// world has a simulator (the shipped one); sessions without a start seed generate it.
pub type FirstFrame = Arc<dyn Fn(u64) -> Result<Tensor> + Send + Sync>;

/// The loop node of a world session.
pub struct SessionLoop {
    model: Arc<WorldModel>,
    pool: Arc<KvPool>,
    guidance: Arc<dyn Guidance>,
    steps: Option<Arc<dyn StepPolicy>>,
    first_frame: Option<FirstFrame>,
}

struct SessionState {
    rollout: ChunkRollout,
    inbox: ActionInbox,
    /// Actions waiting for their `from_frame`, as (frame, key index, id).
    pending: Vec<(u64, i64, u64)>,
    /// Video frames finished so far (the next chunk's first frame).
    frames: u64,
    guidance: GuidanceState,
    steps: Option<Box<dyn StepPolicyState>>,
}

/// The session pipeline: one open-ended loop node reading the session's inbox. Block policies
/// are not bound (the causal forward has no block hook); guidance, the step interceptor and
/// observers are.
pub fn session_pipeline(
    model: Arc<WorldModel>,
    pool: Arc<KvPool>,
    policies: LoopPolicies,
    first_frame: Option<FirstFrame>,
) -> Result<PipelineSpec> {
    let LoopPolicies { guidance, steps, observers, .. } = policies;
    let node = SessionLoop { model, pool, guidance, steps, first_frame };
    let nodes = vec![Node::looped(NODE, Arc::new(node), &[ACTIONS], &[CHUNKS])];
    Ok(PipelineSpec::new("world-session", vec![TaskType::World], nodes, &[ACTIONS], CHUNKS)?.with_observers(observers))
}

/// A session's `node_params.rollout`: the window and the simulator seed of its first frame.
fn node_param(req: &ResolvedRequest, key: &str) -> Result<Option<u64>> {
    match req.node_params.get(NODE).and_then(|p| p.get(key)) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(Some).with_context(|| format!("node_params.{NODE}.{key}: {v} is not a whole number")),
    }
}

fn step_ctx<'a>(request: &'a ResolvedRequest, at: &DenoiseAt) -> StepCtx<'a> {
    StepCtx {
        request,
        step_index: at.step_index,
        num_steps: at.num_steps,
        timestep: at.timestep,
        sigma: at.sigma,
        sigma_next: at.sigma_next,
        expert: 0,
        guidance_scale: request.guidance_scale,
    }
}

/// The deploy's policies as the rollout's guide, for one step of one session.
struct PolicyGuide<'a> {
    request: &'a ResolvedRequest,
    guidance: &'a dyn Guidance,
    state: &'a mut GuidanceState,
    steps: Option<&'a mut (dyn StepPolicyState + 'static)>,
}

impl ChunkGuide for PolicyGuide<'_> {
    fn before(&mut self, at: &DenoiseAt, latents: &Tensor) -> Result<Option<Tensor>> {
        match self.steps.as_deref_mut() {
            Some(p) => p.before_step(&step_ctx(self.request, at), latents).context("step interceptor before-step"),
            None => Ok(None),
        }
    }
    fn combine(&mut self, at: &DenoiseAt, preds: &[Tensor]) -> Result<Tensor> {
        self.guidance.combine(&step_ctx(self.request, at), preds, self.state)
    }
    fn after(&mut self, at: &DenoiseAt, output: &Tensor) -> Result<()> {
        match self.steps.as_deref_mut() {
            Some(p) => p.after_step(&step_ctx(self.request, at), output).context("step interceptor after-step"),
            None => Ok(()),
        }
    }
}

impl SessionState {
    /// Takes the inbox's new actions: each applies from its `from_frame` (held until the chunk
    /// that starts there), else from the first chunk not yet committed.
    fn take_actions(&mut self, model: &WorldModel) {
        for a in self.inbox.take() {
            self.add_action(model, &a);
        }
        if self.rollout.at_chunk_start() && !self.pending.is_empty() {
            // The latest action due by this chunk's first frame takes it.
            let frames = self.frames;
            let due: Vec<_> = self.pending.iter().filter(|p| p.0 <= frames).copied().collect();
            self.pending.retain(|p| p.0 > frames);
            if let Some(&(_, key, id)) = due.iter().max_by_key(|p| p.0) {
                self.rollout.set_action(key, id);
            }
        }
    }

    fn add_action(&mut self, model: &WorldModel, action: &ActionPart) {
        // Keys were checked against the model when the action was sent.
        let Some(key) = action.key.as_deref().and_then(|k| model.actions.index(k).ok()) else { return };
        let id = action.id.unwrap_or(0);
        match action.from_frame {
            Some(f) if f > self.frames => self.pending.push((f, key, id)),
            _ => self.rollout.set_action(key, id),
        }
    }
}

impl LoopStage for SessionLoop {
    fn init(&self, ctx: &NodeCtx, values: &mut Values) -> Result<LoopState> {
        let req = ctx.request;
        let spec = &self.model.spec;
        let inbox = values.inbox(ACTIONS)?.clone();
        let window = node_param(req, "window")?.map_or(spec.window, |w| w as usize);
        let plan = self.guidance.init(req, ctx.meter).context("guidance init")?;
        let mut prompts = Vec::with_capacity(plan.branches.len());
        for b in &plan.branches {
            prompts.push(match b.as_str() {
                "cond" => req.prompt.as_str(),
                "uncond" => req.negative_prompt.as_str(),
                other => {
                    bail!("guidance branch `{other}` has no conditioning in a world session (it has cond and uncond)")
                }
            });
        }
        let rollout = match node_param(req, "start_seed")? {
            Some(seed) => {
                let draw = self.first_frame.as_ref().with_context(|| {
                    format!(
                        "node_params.{NODE}.start_seed: this world model has no simulator to draw a first frame from"
                    )
                })?;
                let frame = draw(seed).context("drawing the first frame")?;
                ChunkRollout::from_frame(&self.model, &self.pool, &prompts, &frame, window, req.seed, ctx.device)?
            }
            None => ChunkRollout::with_window(&self.model, &self.pool, &prompts, window, req.seed, ctx.device)?,
        };
        let mut rollout = rollout;
        if let Some(set) = values.adapters(fastvideo_pipeline::ADAPTERS) {
            rollout.set_adapters(&self.model, Some(std::sync::Arc::clone(set)))?;
        }
        let steps = match &self.steps {
            Some(p) => Some(p.init(req, ctx.meter).context("step interceptor init")?),
            None => None,
        };
        let state = SessionState { rollout, inbox, pending: Vec::new(), frames: 0, guidance: plan.state, steps };
        // Open-ended: the step that finds the inbox closed reports `done`.
        Ok(LoopState { step: 0, total_steps: u32::MAX, inner: Box::new(state) })
    }

    fn step(&self, ctx: &NodeCtx, state: &mut LoopState) -> Result<StepResult> {
        let s: &mut SessionState = state.get_mut()?;
        if s.inbox.is_closed() {
            return Ok(StepResult { done: true, ..Default::default() });
        }
        s.take_actions(&self.model);
        let mut guide = PolicyGuide {
            request: ctx.request,
            guidance: self.guidance.as_ref(),
            state: &mut s.guidance,
            steps: s.steps.as_deref_mut(),
        };
        let unit = s.rollout.step_guided(&self.model, &mut guide)?;
        let mut emit = s.steps.as_deref_mut().map(|p| p.take_events()).unwrap_or_default();
        match unit {
            Unit::Denoised { forwards, output } => Ok(StepResult { done: false, emit, forwards, output: Some(output) }),
            Unit::Committed(chunk) => {
                let video = fastvideo_pipeline::frames_to_video(&chunk.frames, self.model.spec.fps)?;
                let first_frame = s.frames;
                s.frames += video.num_frames as u64;
                emit.push(OmniEvent::Chunk {
                    request_id: ctx.request.request_id.clone(),
                    index: chunk.index,
                    first_frame,
                    action_id: chunk.action_id,
                    video,
                });
                Ok(StepResult { done: false, emit, forwards: 1, output: None })
            }
        }
    }

    fn finalize(&self, _ctx: &NodeCtx, mut state: LoopState, values: &mut Values) -> Result<()> {
        let s: &mut SessionState = state.get_mut()?;
        values.insert(CHUNKS, Value::Tensor(Tensor::from(s.rollout.chunks_done() as i64)));
        Ok(())
    }

    fn step_ctx<'a>(&self, ctx: &NodeCtx<'a>, state: &LoopState) -> Option<StepCtx<'a>> {
        let s = state.inner.downcast_ref::<SessionState>()?;
        // Commit passes are not solver steps: observers see the denoise steps.
        s.rollout.denoise_at().map(|at| step_ctx(ctx.request, &at))
    }
}
