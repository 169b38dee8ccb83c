use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{anyhow, Context, Result};
use fastvideo_request::{Artifact, LatentsArtifact, OmniEvent, OmniOutput, RequestMetrics, ResolvedRequest};
use tch::{Device, Kind};

use crate::{
    LoopState, NodeCtx, NodeKind, Observed, ObserverState, PipelineSpec, PluginMeter, RewardInput, Value, Values,
};

/// Cancels a run at its next step boundary. Cheap to clone and share with other threads.
#[derive(Clone, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    /// Asks the run to stop; its next `advance` fails with `cancelled`.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed)
    }
    /// Whether [`cancel`](Self::cancel) has been called on this token or a clone of it.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// What one call to [`PipelineRun::advance`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Advance {
    /// Ran a one-shot node, or initialized / stepped / finalized a loop node.
    Worked,
    /// Every node has run; call [`PipelineRun::finish`].
    Finished,
}

/// One request's walk through a pipeline, one unit of work per [`advance`](Self::advance): a
/// whole one-shot node, a loop's `init`, one loop `step`, or a loop's `finalize`. The caller —
/// the CLI's simple loop, or the engine's step scheduler — decides when to advance which run.
pub struct PipelineRun {
    spec: Arc<PipelineSpec>,
    request: ResolvedRequest,
    device: Device,
    values: Values,
    cursor: usize,
    active: Option<LoopState>,
    cancel: CancelToken,
    metrics: RequestMetrics,
    started: Instant,
    node_started: Instant,
    /// Per-request states of the spec's observers, made on the first `advance`.
    observers: Vec<Box<dyn ObserverState>>,
    observing: bool,
    /// Plugin time of this request, charged by its policies' states.
    meter: PluginMeter,
}

/// The request's decoded video as `[frames, height, width, 3]` float in `[0, 1]` on `device`,
/// for the rewards that score it (`name` is the first one, for the error).
fn video_tensor(out: &OmniOutput, device: Device, name: &str) -> Result<tch::Tensor> {
    let v =
        out.video().ok_or_else(|| anyhow!("outputs.rewards: this request produced no video for `{name}` to score"))?;
    Ok(tch::Tensor::from_slice(&v.rgb)
        .reshape([v.num_frames as i64, v.height as i64, v.width as i64, 3])
        .to_device(device)
        .to_kind(Kind::Float)
        / 255.0)
}

/// Tells every observer; the first error fails the request.
fn notify(
    observers: &mut [Box<dyn ObserverState>],
    event: Observed,
    output: Option<&tch::Tensor>,
    emit: &mut dyn FnMut(OmniEvent),
) -> Result<()> {
    for o in observers {
        o.on_event(event, output, emit)?;
    }
    Ok(())
}

impl PipelineRun {
    /// A run at the first node; nothing executes until the first `advance`. `values` holds
    /// request-provided values (e.g. initial latents).
    pub fn new(
        spec: Arc<PipelineSpec>,
        request: ResolvedRequest,
        device: Device,
        values: Values,
        cancel: CancelToken,
    ) -> Self {
        let metrics = RequestMetrics {
            seed: request.seed,
            steps: request.steps,
            weight_epoch: spec.weight_epoch,
            ..Default::default()
        };
        let now = Instant::now();
        Self {
            spec,
            request,
            device,
            values,
            cursor: 0,
            active: None,
            cancel,
            metrics,
            started: now,
            node_started: now,
            observers: Vec::new(),
            observing: false,
            meter: PluginMeter::default(),
        }
    }

    /// The pipeline this run walks (the weights it started on).
    pub fn spec(&self) -> &Arc<PipelineSpec> {
        &self.spec
    }

    /// The request this run is serving.
    pub fn request(&self) -> &ResolvedRequest {
        &self.request
    }

    /// What the run has measured so far (step times grow by one per loop step).
    pub fn metrics(&self) -> &RequestMetrics {
        &self.metrics
    }

    /// Name of the node the next `advance` works on.
    pub fn current_node(&self) -> Option<&str> {
        self.next_index(self.cursor).map(|i| self.spec.nodes[i].name.as_str())
    }

    fn next_index(&self, from: usize) -> Option<usize> {
        (from..self.spec.nodes.len()).find(|&i| self.spec.nodes[i].runs(&self.request))
    }

    /// Does one unit of work; events go to `emit`. Returns an error naming the node (and step)
    /// that failed, or `cancelled` when the token was set; either way the run is over.
    pub fn advance(&mut self, emit: &mut dyn FnMut(OmniEvent)) -> Result<Advance> {
        let r = self.advance_unit(emit);
        self.metrics.plugin_seconds = self.meter.used().as_secs_f64();
        if let Err(e) = &r {
            if self.observing {
                let outcome = if self.cancel.is_cancelled() { "cancelled" } else { "failed" };
                // The request is over either way; an observer failing now changes nothing.
                if let Err(oe) = notify(&mut self.observers, Observed::RequestEnd(outcome), None, emit) {
                    tracing::debug!(error = %format!("{oe:#}"), request = %self.request.request_id, "observer at request end after {e:#}");
                }
                self.observing = false;
            }
        }
        r
    }

    /// Ends a run that will not be advanced again (cancelled or failed from outside, e.g. by
    /// the engine): observers that saw it start hear `outcome` as its end. Idempotent.
    pub fn abort(&mut self, outcome: &str, emit: &mut dyn FnMut(OmniEvent)) {
        if std::mem::take(&mut self.observing) {
            if let Err(e) = notify(&mut self.observers, Observed::RequestEnd(outcome), None, emit) {
                tracing::debug!(error = %format!("{e:#}"), request = %self.request.request_id, "observer at abort");
            }
        }
    }

    fn advance_unit(&mut self, emit: &mut dyn FnMut(OmniEvent)) -> Result<Advance> {
        if self.cancel.is_cancelled() {
            return Err(anyhow!("cancelled"));
        }
        if self.cursor == 0 && self.active.is_none() && !self.spec.observers.is_empty() && self.observers.is_empty() {
            for o in &self.spec.observers {
                self.observers.push(o.init(&self.request, &self.meter).context("observer init")?);
            }
            self.observing = true;
            notify(&mut self.observers, Observed::RequestStart, None, emit)?;
        }
        let Some(idx) = self.next_index(self.cursor) else {
            return Ok(Advance::Finished);
        };
        let spec = Arc::clone(&self.spec);
        let node = &spec.nodes[idx];
        let ctx = NodeCtx { request: &self.request, node: &node.name, device: self.device, meter: &self.meter };
        let _guard = tch::no_grad_guard();
        let rid = &self.request.request_id;
        let observing = self.observing;
        match &node.kind {
            NodeKind::Stage(stage) => {
                emit(OmniEvent::NodeStarted { request_id: rid.clone(), node: node.name.clone() });
                if observing {
                    notify(&mut self.observers, Observed::NodeStart(&node.name), None, emit)?;
                }
                let t = Instant::now();
                stage.run(&ctx, &mut self.values).with_context(|| format!("node `{}`", node.name))?;
                self.metrics.node_seconds.push((node.name.clone(), t.elapsed().as_secs_f64()));
                self.cursor = idx + 1;
                if observing {
                    notify(&mut self.observers, Observed::NodeEnd(&node.name), None, emit)?;
                }
            }
            NodeKind::Loop(stage) => match self.active.take() {
                None => {
                    emit(OmniEvent::NodeStarted { request_id: rid.clone(), node: node.name.clone() });
                    if observing {
                        notify(&mut self.observers, Observed::NodeStart(&node.name), None, emit)?;
                    }
                    self.node_started = Instant::now();
                    let st =
                        stage.init(&ctx, &mut self.values).with_context(|| format!("node `{}` init", node.name))?;
                    self.active = Some(st);
                }
                Some(mut st) => {
                    let finished = st.step >= st.total_steps;
                    if finished {
                        stage
                            .finalize(&ctx, st, &mut self.values)
                            .with_context(|| format!("node `{}` finalize", node.name))?;
                        self.metrics.node_seconds.push((node.name.clone(), self.node_started.elapsed().as_secs_f64()));
                        self.cursor = idx + 1;
                        if observing {
                            notify(&mut self.observers, Observed::NodeEnd(&node.name), None, emit)?;
                        }
                    } else {
                        let step_ctx = if observing { stage.step_ctx(&ctx, &st) } else { None };
                        if let Some(sc) = &step_ctx {
                            notify(&mut self.observers, Observed::StepStart(sc), None, emit)?;
                        }
                        let t = Instant::now();
                        let r = stage
                            .step(&ctx, &mut st)
                            .with_context(|| format!("node `{}` step {}", node.name, st.step + 1))?;
                        let elapsed = t.elapsed().as_secs_f64();
                        if let Some(sc) = &step_ctx {
                            notify(&mut self.observers, Observed::StepEnd(sc), r.output.as_ref(), emit)?;
                        }
                        self.record_step(node, st, r, elapsed, emit);
                    }
                }
            },
        }
        Ok(Advance::Worked)
    }

    /// Bookkeeping after one loop step: counters, metrics, the step's events and progress. The
    /// steps of a gated loop (one a request may ask for, such as the prompt extension's decode
    /// loop) are not the pipeline's steps: they count as that node's time and send no progress,
    /// so the step metrics, the scheduler's per-step costs and every front end's progress stay
    /// the main loop's.
    fn record_step(
        &mut self,
        node: &crate::Node,
        mut st: LoopState,
        r: crate::StepResult,
        elapsed: f64,
        emit: &mut dyn FnMut(OmniEvent),
    ) {
        st.step += 1;
        if r.done {
            st.total_steps = st.step;
        }
        r.emit.into_iter().for_each(&mut *emit);
        if node.gate.is_none() {
            self.metrics.step_seconds.push(elapsed);
            self.metrics.forwards += r.forwards;
            emit(OmniEvent::Progress {
                request_id: self.request.request_id.clone(),
                node: node.name.clone(),
                step: st.step,
                total_steps: st.total_steps,
            });
        }
        self.active = Some(st);
    }

    /// When the next unit is a loop step that can be batched: the loop node and the stage's
    /// batch key. Runs with equal answers can go through [`step_batch`](Self::step_batch).
    pub fn batch_key(&self) -> Option<(usize, u64)> {
        let idx = self.next_index(self.cursor)?;
        let node = &self.spec.nodes[idx];
        let (NodeKind::Loop(stage), Some(st)) = (&node.kind, &self.active) else { return None };
        // Observers see each request's steps one at a time; a gated loop's steps run alone (the
        // executor charges batched steps as the pipeline's steps).
        if st.step >= st.total_steps
            || self.cancel.is_cancelled()
            || !self.spec.observers.is_empty()
            || node.gate.is_some()
        {
            return None;
        }
        let ctx = NodeCtx { request: &self.request, node: &node.name, device: self.device, meter: &self.meter };
        stage.batch_key(&ctx, st).map(|k| (idx, k))
    }

    /// Tokens the next loop step adds to a packed batch (see `LoopStage::batch_tokens`); `None`
    /// outside a loop or when the loop does not count tokens.
    pub fn batch_tokens(&self) -> Option<u64> {
        let idx = self.next_index(self.cursor)?;
        let node = &self.spec.nodes[idx];
        let (NodeKind::Loop(stage), Some(st)) = (&node.kind, &self.active) else { return None };
        let ctx = NodeCtx { request: &self.request, node: &node.name, device: self.device, meter: &self.meter };
        stage.batch_tokens(&ctx, st)
    }

    /// One loop step of each run, as one call of the loop stage (e.g. one batched forward).
    /// Every run's [`batch_key`](Self::batch_key) must be `Some` and equal, and the runs must
    /// share one pipeline; otherwise each run gets an error and nothing runs. Returns one result
    /// per run; `emit` receives each run's events with the run's index.
    pub fn step_batch(runs: &mut [&mut PipelineRun], emit: &mut dyn FnMut(usize, OmniEvent)) -> Vec<Result<()>> {
        let key = runs.first().and_then(|r| r.batch_key());
        let same = key.is_some() && runs.iter().all(|r| r.batch_key() == key && Arc::ptr_eq(&r.spec, &runs[0].spec));
        if !same {
            return runs.iter().map(|_| Err(anyhow!("step_batch: runs are not at one batchable step"))).collect();
        }
        let (idx, _) = key.expect("checked");
        let spec = Arc::clone(&runs[0].spec);
        let node = &spec.nodes[idx];
        let NodeKind::Loop(stage) = &node.kind else { unreachable!("batch keys come from loop nodes") };
        let _guard = tch::no_grad_guard();
        let mut states: Vec<LoopState> = runs.iter_mut().map(|r| r.active.take().expect("checked")).collect();
        let t = Instant::now();
        let results = {
            let ctxs: Vec<NodeCtx> = runs
                .iter()
                .map(|r| NodeCtx { request: &r.request, node: &node.name, device: r.device, meter: &r.meter })
                .collect();
            let mut refs: Vec<&mut LoopState> = states.iter_mut().collect();
            stage.step_batch(&ctxs, &mut refs)
        };
        let elapsed = t.elapsed().as_secs_f64();
        let mut out = Vec::with_capacity(runs.len());
        for (i, ((run, st), r)) in runs.iter_mut().zip(states).zip(results).enumerate() {
            // Each request's policies charged their own meter inside the batched step.
            run.metrics.plugin_seconds = run.meter.used().as_secs_f64();
            match r {
                Ok(r) => {
                    run.record_step(node, st, r, elapsed, &mut |e| emit(i, e));
                    out.push(Ok(()));
                }
                Err(e) => {
                    let step = st.step + 1;
                    run.active = Some(st);
                    out.push(Err(e.context(format!("node `{}` step {step}", node.name))));
                }
            }
        }
        out
    }

    /// Scores the finished request with every reward the request named, in the order named:
    /// each gets the decoded video or the final latents, as it declares.
    fn score_rewards(&mut self, out: &mut OmniOutput, emit: &mut dyn FnMut(OmniEvent)) -> Result<()> {
        if self.request.outputs.rewards.is_empty() {
            return Ok(());
        }
        let spec = Arc::clone(&self.spec);
        let mut video = None;
        for name in &self.request.outputs.rewards {
            let reward = spec.reward(name).ok_or_else(|| anyhow!("outputs.rewards: no reward named `{name}`"))?;
            let input = match (reward.input(), &video) {
                (RewardInput::Latents, _) => self.values.tensor(&spec.latents)?.to_kind(Kind::Float),
                (RewardInput::Video, Some(v)) => tch::Tensor::shallow_clone(v),
                (RewardInput::Video, None) => video.insert(video_tensor(out, self.device, name)?).shallow_clone(),
            };
            let t = Instant::now();
            let value = reward.score(&self.request, &self.meter, &input).with_context(|| format!("reward `{name}`"))?;
            out.metrics.node_seconds.push((format!("reward:{name}"), t.elapsed().as_secs_f64()));
            out.rewards.insert(name.clone(), value);
            emit(OmniEvent::Reward { request_id: out.request_id.clone(), name: name.clone(), value });
        }
        Ok(())
    }

    /// Advances until finished (the single-request path: CLI, tests).
    pub fn run_to_end(&mut self, emit: &mut dyn FnMut(OmniEvent)) -> Result<()> {
        while self.advance(emit)? == Advance::Worked {}
        Ok(())
    }

    /// The run's named values so far (what each node wrote): for tests and tools that check a
    /// stage's intermediate output.
    pub fn values(&self) -> &Values {
        &self.values
    }

    /// Collects the artifacts once [`advance`](Self::advance) returned `Finished`, emitting an
    /// `Artifact` event per artifact and a final `Done`.
    pub fn finish(mut self, emit: &mut dyn FnMut(OmniEvent)) -> Result<OmniOutput> {
        let mut out = OmniOutput {
            request_id: self.request.request_id.clone(),
            artifacts: Default::default(),
            metrics: std::mem::take(&mut self.metrics),
            rewards: Default::default(),
            extended_prompt: self.values.opt_text(crate::EXTENDED_PROMPT).map(str::to_string),
        };
        // The spec names what a request returns; a final output that is not a video (a toy
        // pipeline ending in latents) stays a value.
        let spec = Arc::clone(&self.spec);
        match self.values.remove(&spec.final_output) {
            Some(Value::Video(v)) => {
                out.artifacts.insert(spec.final_output.clone(), Artifact::Video(v));
            }
            Some(other) => self.values.insert(spec.final_output.clone(), other),
            None => {}
        }
        // Sound is returned when the request resolved it; a run asked for sound that made none is
        // a family's bug, not a silent clip.
        let sound = self.request.generate_sound;
        match self.values.remove(crate::AUDIO) {
            Some(Value::Audio(a)) if sound => {
                out.artifacts.insert(crate::AUDIO.into(), Artifact::Audio(a));
            }
            _ if sound => return Err(anyhow!("the request resolved generate_sound, but this pipeline made no sound")),
            Some(Value::Audio(_)) | None => {}
            Some(other) => self.values.insert(crate::AUDIO, other),
        }
        if let Some(Value::Tensor(t)) = self.values.remove(crate::ACTIONS) {
            let t = t.to_kind(Kind::Float).to_device(Device::Cpu).contiguous();
            let data = Vec::<f32>::try_from(t.flatten(0, -1))?;
            out.artifacts.insert(crate::ACTIONS.into(), Artifact::Actions(LatentsArtifact { shape: t.size(), data }));
        }
        if self.request.outputs.return_latents {
            let t = self.values.tensor(&spec.latents)?.to_kind(Kind::Float).to_device(Device::Cpu).contiguous();
            let data = Vec::<f32>::try_from(t.flatten(0, -1))?;
            out.artifacts.insert("latents".into(), Artifact::Latents(LatentsArtifact { shape: t.size(), data }));
        }
        if self.request.outputs.return_trajectory {
            match self.values.remove(crate::denoise::TRAJECTORY) {
                Some(Value::Trajectory(t)) => {
                    out.artifacts.insert(crate::denoise::TRAJECTORY.into(), Artifact::Trajectory(*t));
                }
                _ => return Err(anyhow!("this pipeline's loop records no trajectory (outputs.return_trajectory)")),
            }
        }
        self.score_rewards(&mut out, emit)?;
        for name in out.artifacts.keys() {
            emit(OmniEvent::Artifact { request_id: out.request_id.clone(), name: name.clone() });
            if self.observing {
                notify(&mut self.observers, Observed::Artifact(name), None, emit)?;
            }
        }
        if self.observing {
            notify(&mut self.observers, Observed::RequestEnd("completed"), None, emit)?;
        }
        out.metrics.plugin_seconds = self.meter.used().as_secs_f64();
        out.metrics.total_seconds = self.started.elapsed().as_secs_f64();
        emit(OmniEvent::Done { request_id: out.request_id.clone(), metrics: out.metrics.clone() });
        Ok(out)
    }
}
