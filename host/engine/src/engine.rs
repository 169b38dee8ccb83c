//! The async front ([`Engine`]) and the executor thread behind it.
//!
//! Callers on any thread or task `submit` requests; admission (limits, plugin parameters,
//! predicted memory and time, queue room) happens right there, so a refused request costs
//! nothing and never reaches the executor. Admitted requests travel over a channel to one
//! executor thread that owns every tensor: it asks the scheduler [`State`] which request's next
//! unit of work runs, advances that request's [`PipelineRun`] by one unit, feeds the measured
//! time back into the [`CostModel`], and repeats. Events stream to each request's handle as they
//! happen; the final output (or error) arrives on a oneshot.

use std::collections::{HashMap, HashSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use fastvideo_pipeline::{Advance, CancelToken, PipelineRun, PipelineSpec, Values};
use fastvideo_request::{ActionPart, ModelLimits, OmniEvent, OmniOutput, OmniRequest, RequestError, ResolvedRequest};
use tch::Device;
use tokio::sync::{mpsc, oneshot, watch};

use crate::cost::{CostConfig, CostKey, CostModel};
use crate::scheduler::{Capacity, Policy, State};
use crate::session::{
    Jobs, LiveSessions, Pacer, Pick, SessionCommand, SessionEvent, SessionInfo, SessionModel, SessionRequest,
    SessionShared, STREAM_BUFFER_CHUNKS,
};
use crate::{EngineError, Metrics, WeightUpdates, WeightsInfo};

/// Engine settings (`fastvideo serve`'s scheduling and admission flags).
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub policy: Policy,
    /// Seconds of predicted work forgiven per second a request waits (anti-starvation).
    pub aging: f64,
    /// A request in the system longer than this many times its predicted solo time is overdue:
    /// overdue requests get `overdue_share` of the executor's time while others wait too, which
    /// bounds any request's slowdown ([`State`]). `f64::INFINITY`: off. Default 3 and 0.5:
    /// below capacity a long job under a stream of short ones finishes within about 5x its solo
    /// time (measured 2.5x at p95, against 4.1x without), and the short ones lose nothing.
    pub max_stretch: f64,
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
    pub cost: CostConfig,
    /// Live world-model sessions at once; more get `sessions_full`.
    pub max_sessions: usize,
    /// A session nobody streams or acts on for this long is closed.
    pub session_idle: Duration,
    /// The share of the executor's recent time that waiting jobs get even when sessions ask for
    /// all of it (more sessions than the machine can keep at their frame rate): without a floor,
    /// jobs would wait until the sessions end. 0 gives sessions absolute priority.
    pub job_floor: f64,
}

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
            cost: CostConfig::default(),
            max_sessions: 4,
            session_idle: Duration::from_secs(60),
            job_floor: 0.25,
        }
    }
}

/// Classifies a run's error into a short stable code (e.g. `plugin_failed`).
pub type Classifier = fn(&anyhow::Error) -> &'static str;

/// Extra admission check beyond the model's limits (plugin parameters against the deploy).
pub type RequestCheck = Box<dyn Fn(&ResolvedRequest) -> Result<(), RequestError> + Send + Sync>;

/// What the engine serves: one model's pipeline on one device.
pub struct EngineModel {
    pub id: String,
    pub limits: ModelLimits,
    pub spec: Arc<PipelineSpec>,
    pub device: Device,
    pub check: RequestCheck,
    pub classify: Classifier,
    /// How to load other weights (`update_weights`); none refuses updates.
    pub weights: Option<WeightUpdates>,
}

/// A submitted request: its events as they happen, and its final output.
pub struct Handle {
    pub request_id: String,
    /// The request as resolved against the model (defaults filled, seed drawn).
    pub request: ResolvedRequest,
    pub predicted_seconds: f64,
    pub events: mpsc::UnboundedReceiver<OmniEvent>,
    pub output: oneshot::Receiver<Result<OmniOutput, EngineError>>,
}

impl Handle {
    /// Waits for the result, dropping events.
    pub async fn wait(self) -> Result<OmniOutput, EngineError> {
        self.output.await.unwrap_or(Err(EngineError::Stopped))
    }
}

enum Command {
    Submit(Box<Job>),
    Cancel(String),
    CancelAll,
    Session(SessionCommand),
    /// New requests start on this pipeline from now on.
    Swap(Arc<PipelineSpec>, oneshot::Sender<()>),
}

struct Job {
    id: String,
    req: Option<ResolvedRequest>,
    run: Option<PipelineRun>,
    key: CostKey,
    /// Admission's prediction, handed to the scheduler as is.
    predicted: f64,
    memory: u64,
    steps_left: u32,
    one_shot_spent: f64,
    submitted: Instant,
    cancel: CancelToken,
    events: mpsc::UnboundedSender<OmniEvent>,
    done: Option<oneshot::Sender<Result<OmniOutput, EngineError>>>,
    span: tracing::Span,
}

struct Shared {
    live: Mutex<HashSet<String>>,
    draining: AtomicBool,
    cost: Mutex<CostModel>,
    live_count: watch::Sender<usize>,
}

impl Shared {
    fn release(&self, id: &str) {
        let mut live = self.live.lock().unwrap();
        live.remove(id);
        self.live_count.send_replace(live.len());
    }
}

struct Inner {
    tx: Mutex<std_mpsc::Sender<Command>>,
    shared: Arc<Shared>,
    cfg: EngineConfig,
    model_id: String,
    limits: ModelLimits,
    check: RequestCheck,
    metrics: Metrics,
    sessions: Option<Arc<dyn SessionModel>>,
    session_shared: Arc<SessionShared>,
    weights: Option<WeightUpdates>,
    /// Which weights new requests get; the update lock serializes updates.
    serving: Mutex<Option<WeightsInfo>>,
    update: tokio::sync::Mutex<()>,
}

/// The engine: cheap to clone, usable from any thread or task.
#[derive(Clone)]
pub struct Engine(Arc<Inner>);

fn random_seed() -> u64 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    (t as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ std::process::id() as u64
}

impl Engine {
    /// Starts the executor thread for `model`.
    pub fn start(model: EngineModel, cfg: EngineConfig, metrics: Metrics) -> Self {
        Self::start_with_sessions(model, None, cfg, metrics)
    }

    /// [`start`](Self::start), also serving live sessions of a world model on the same executor.
    pub fn start_with_sessions(
        model: EngineModel,
        sessions: Option<Arc<dyn SessionModel>>,
        cfg: EngineConfig,
        metrics: Metrics,
    ) -> Self {
        let (tx, rx) = std_mpsc::channel();
        let session_shared = Arc::new(SessionShared::default());
        let shared = Arc::new(Shared {
            live: Mutex::new(HashSet::new()),
            draining: AtomicBool::new(false),
            cost: Mutex::new(CostModel::new(cfg.cost)),
            live_count: watch::channel(0).0,
        });
        let EngineModel { id, limits, spec, device, check, classify, weights } = model;
        let exec = Executor {
            spec,
            device,
            classify,
            shared: shared.clone(),
            metrics: metrics.clone(),
            state: State::new(
                cfg.policy,
                cfg.aging,
                Capacity { max_active: cfg.max_active.max(1), memory_bytes: cfg.memory_bytes },
            )
            .with_max_stretch(cfg.max_stretch, cfg.overdue_share),
            jobs: HashMap::new(),
            keys: HashMap::new(),
            next_key: 0,
            max_batch: cfg.max_batch.max(1),
            sessions: LiveSessions::new(
                sessions.clone(),
                cfg.session_idle,
                cfg.job_floor,
                session_shared.clone(),
                metrics.clone(),
            ),
        };
        std::thread::Builder::new()
            .name("fastvideo-executor".into())
            .spawn(move || exec.run(rx))
            .expect("spawning the executor thread");
        Engine(Arc::new(Inner {
            tx: Mutex::new(tx),
            shared,
            cfg,
            model_id: id,
            limits,
            check,
            metrics,
            sessions,
            session_shared,
            weights,
            serving: Mutex::new(None),
            update: tokio::sync::Mutex::new(()),
        }))
    }

    /// Which weights new requests run on: epoch, content hash, source. The start weights' hash is
    /// computed on the first call (it reads the checkpoint once).
    pub async fn weights(&self) -> Result<WeightsInfo, EngineError> {
        let w = self.0.weights.clone().ok_or(EngineError::NoWeightUpdates)?;
        let _guard = self.0.update.lock().await;
        self.serving(&w).await
    }

    /// The serving weights; the caller holds the update lock.
    async fn serving(&self, w: &WeightUpdates) -> Result<WeightsInfo, EngineError> {
        if let Some(info) = self.0.serving.lock().unwrap().clone() {
            return Ok(info);
        }
        let (loader, path) = (w.loader.clone(), w.initial.clone());
        let hash = tokio::task::spawn_blocking(move || loader.hash(&path))
            .await
            .map_err(|e| EngineError::Failed { code: "internal_error".into(), message: e.to_string() })?
            .map_err(|e| EngineError::Failed { code: "weights_unreadable".into(), message: format!("{e:#}") })?;
        let info = WeightsInfo::new(0, hash, w.initial.clone());
        *self.0.serving.lock().unwrap() = Some(info.clone());
        Ok(info)
    }

    /// Loads the transformer weights at `path` (off the executor) and, if they load, makes them
    /// the ones every request not yet started runs on, as the next epoch. Requests already running
    /// finish on the weights they started with. A load that fails changes nothing. Updates are
    /// applied one at a time, in the order they arrive. `source` is what [`weights`](Self::weights)
    /// reports as their origin (the path when `None`; e.g. `upload` for a file that is deleted
    /// once loaded).
    pub async fn update_weights(
        &self,
        path: std::path::PathBuf,
        source: Option<std::path::PathBuf>,
    ) -> Result<WeightsInfo, EngineError> {
        let inner = &self.0;
        let w = inner.weights.clone().ok_or(EngineError::NoWeightUpdates)?;
        let _guard = inner.update.lock().await;
        let current = self.serving(&w).await?;
        let (loader, p) = (w.loader.clone(), path.clone());
        let loaded = tokio::task::spawn_blocking(move || -> anyhow::Result<(PipelineSpec, String)> {
            let spec = loader.load(&p)?;
            Ok((spec, loader.hash(&p)?))
        })
        .await
        .map_err(|e| EngineError::Failed { code: "internal_error".into(), message: e.to_string() })?;
        let (mut spec, hash) = loaded.map_err(|e| EngineError::WeightsRefused(format!("{e:#}")))?;
        spec.weight_epoch = current.epoch + 1;
        let (tx, rx) = oneshot::channel();
        inner.tx.lock().unwrap().send(Command::Swap(Arc::new(spec), tx)).map_err(|_| EngineError::Stopped)?;
        rx.await.map_err(|_| EngineError::Stopped)?;
        let info = WeightsInfo::new(current.epoch + 1, hash, source.unwrap_or(path));
        *inner.serving.lock().unwrap() = Some(info.clone());
        tracing::info!(epoch = info.epoch, hash = %info.hash, source = %info.source.display(), "weights updated");
        Ok(info)
    }

    /// The session model, if this engine serves one.
    pub fn session_model(&self) -> Option<&Arc<dyn SessionModel>> {
        self.0.sessions.as_ref()
    }

    /// Opens a live session; its chunks arrive on the receiver (dropping it closes the session).
    pub async fn open_session(
        &self,
        id: String,
        req: SessionRequest,
    ) -> Result<mpsc::Receiver<SessionEvent>, EngineError> {
        let inner = &self.0;
        if inner.sessions.is_none() {
            return Err(EngineError::NoSessions);
        }
        if inner.shared.draining.load(Ordering::SeqCst) {
            return Err(EngineError::Draining);
        }
        let live = inner.session_shared.info.lock().unwrap().len();
        if live >= inner.cfg.max_sessions {
            return Err(EngineError::SessionsFull { max: inner.cfg.max_sessions });
        }
        let (etx, erx) = mpsc::channel(STREAM_BUFFER_CHUNKS);
        let (rtx, rrx) = oneshot::channel();
        let cmd = SessionCommand::Open { id, req, events: etx, reply: rtx };
        inner.tx.lock().unwrap().send(Command::Session(cmd)).map_err(|_| EngineError::Stopped)?;
        rrx.await.unwrap_or(Err(EngineError::Stopped))?;
        Ok(erx)
    }

    /// Where a session stands, or `None` when it is not live.
    pub fn session_info(&self, id: &str) -> Option<SessionInfo> {
        self.0.session_shared.info.lock().unwrap().get(id).cloned()
    }

    /// Gives a session an action (from its `from_frame`, or the first chunk not yet committed).
    /// It is checked against the model here, so a bad one is refused before anything runs.
    pub fn session_action(&self, id: &str, action: &ActionPart) -> Result<(), EngineError> {
        let model = self.0.sessions.as_ref().ok_or(EngineError::NoSessions)?;
        if self.session_info(id).is_none() {
            return Err(EngineError::NoSession(id.to_string()));
        }
        action.check(&model.actions(), model.continuous_actions())?;
        let cmd = SessionCommand::Action { id: id.to_string(), action: action.clone() };
        self.0.tx.lock().unwrap().send(Command::Session(cmd)).map_err(|_| EngineError::Stopped)
    }

    /// Closes a session (its slabs are returned at once); `false` when it was not live.
    pub fn close_session(&self, id: &str, reason: &str) -> bool {
        // Gone for callers at once; the executor drops its state at its next command.
        let live = self.0.session_shared.info.lock().unwrap().remove(id).is_some();
        let cmd = SessionCommand::Close { id: id.to_string(), reason: reason.to_string() };
        let _ = self.0.tx.lock().unwrap().send(Command::Session(cmd));
        live
    }

    /// Tells the executor whether a client is streaming the session (a streamed session never
    /// expires for idleness).
    pub fn session_streaming(&self, id: &str, on: bool) {
        let cmd = SessionCommand::Streaming { id: id.to_string(), on };
        let _ = self.0.tx.lock().unwrap().send(Command::Session(cmd));
    }

    /// Tells the executor a client dropped `frames` of the session's frames unshown (stale after
    /// an action), so its schedule makes up for them.
    pub fn session_frames_skipped(&self, id: &str, frames: u64) {
        if frames > 0 {
            let cmd = SessionCommand::Skipped { id: id.to_string(), frames };
            let _ = self.0.tx.lock().unwrap().send(Command::Session(cmd));
        }
    }

    pub fn model_id(&self) -> &str {
        &self.0.model_id
    }

    pub fn limits(&self) -> &ModelLimits {
        &self.0.limits
    }

    pub fn config(&self) -> &EngineConfig {
        &self.0.cfg
    }

    pub fn metrics(&self) -> &Metrics {
        &self.0.metrics
    }

    /// Checks and admits a request. Every refusal happens here, before any work.
    pub fn submit(&self, req: OmniRequest) -> Result<Handle, EngineError> {
        let inner = &self.0;
        let refuse = |e: EngineError| {
            inner.metrics.count("rejected");
            Err(e)
        };
        if inner.shared.draining.load(Ordering::SeqCst) {
            return refuse(EngineError::Draining);
        }
        let req = match req.resolve(&inner.limits, random_seed) {
            Ok(r) => r,
            Err(e) => return refuse(e.into()),
        };
        if let Err(e) = (inner.check)(&req) {
            return refuse(e.into());
        }
        let key = CostKey::of(&req);
        let (predicted, memory) = {
            let cost = inner.shared.cost.lock().unwrap();
            (cost.request_seconds(&key, req.steps), cost.memory_bytes(&key))
        };
        if memory > inner.cfg.memory_bytes {
            return refuse(EngineError::TooLarge {
                field: "width".into(),
                message: format!(
                    "{}x{}x{} frames needs about {} MiB, more than this server's {} MiB; ask for fewer pixels or frames",
                    req.width,
                    req.height,
                    req.num_frames,
                    memory >> 20,
                    inner.cfg.memory_bytes >> 20
                ),
            });
        }
        if let Some(max) = inner.cfg.max_request_seconds {
            if predicted > max {
                return refuse(EngineError::TooLarge {
                    field: "num_inference_steps".into(),
                    message: format!(
                        "predicted to take {predicted:.1} s, more than this server allows ({max:.1} s); ask for fewer steps or pixels"
                    ),
                });
            }
        }
        {
            let mut live = inner.shared.live.lock().unwrap();
            if live.contains(&req.request_id) {
                drop(live);
                return refuse(EngineError::Duplicate(req.request_id));
            }
            if live.len() >= inner.cfg.max_queue {
                let queued = live.len();
                drop(live);
                return refuse(EngineError::QueueFull { queued });
            }
            live.insert(req.request_id.clone());
            inner.shared.live_count.send_replace(live.len());
        }
        inner.metrics.predicted_request_seconds.observe(predicted);
        let (etx, erx) = mpsc::unbounded_channel();
        let (dtx, drx) = oneshot::channel();
        let request_id = req.request_id.clone();
        let span = tracing::info_span!("request", id = %request_id, steps = req.steps, predicted_s = predicted);
        let resolved = req.clone();
        let job = Job {
            id: request_id.clone(),
            steps_left: req.steps,
            req: Some(req),
            run: None,
            key,
            predicted,
            memory,
            one_shot_spent: 0.0,
            submitted: Instant::now(),
            cancel: CancelToken::default(),
            events: etx,
            done: Some(dtx),
            span,
        };
        if inner.tx.lock().unwrap().send(Command::Submit(Box::new(job))).is_err() {
            inner.shared.release(&request_id);
            return Err(EngineError::Stopped);
        }
        Ok(Handle { request_id, request: resolved, predicted_seconds: predicted, events: erx, output: drx })
    }

    /// Cancels a queued or running request at its next unit boundary. `false` when the id is not
    /// live (unknown, or already finished).
    pub fn cancel(&self, request_id: &str) -> bool {
        let live = self.0.shared.live.lock().unwrap().contains(request_id);
        if live {
            let _ = self.0.tx.lock().unwrap().send(Command::Cancel(request_id.to_string()));
        }
        live
    }

    /// Requests queued or running.
    pub fn live(&self) -> usize {
        *self.0.shared.live_count.borrow()
    }

    pub fn is_draining(&self) -> bool {
        self.0.shared.draining.load(Ordering::SeqCst)
    }

    /// Stops admitting; with `cancel_running`, also cancels everything admitted.
    pub fn drain(&self, cancel_running: bool) {
        self.0.shared.draining.store(true, Ordering::SeqCst);
        if cancel_running {
            let _ = self.0.tx.lock().unwrap().send(Command::CancelAll);
        }
    }

    /// Resolves once no request is queued or running.
    pub async fn idle(&self) {
        let mut rx = self.0.shared.live_count.subscribe();
        let _ = rx.wait_for(|n| *n == 0).await;
    }

    /// Predicted seconds of a request with this shape and step count (for clients and tests).
    pub fn predict(&self, req: &ResolvedRequest) -> f64 {
        self.0.shared.cost.lock().unwrap().request_seconds(&CostKey::of(req), req.steps)
    }
}

struct Executor {
    spec: Arc<PipelineSpec>,
    device: Device,
    classify: Classifier,
    shared: Arc<Shared>,
    metrics: Metrics,
    state: State,
    jobs: HashMap<u64, Job>,
    keys: HashMap<String, u64>,
    next_key: u64,
    max_batch: usize,
    sessions: LiveSessions,
}

/// A span naming the scheduler slots stepped together (for logs).
fn jobs_span(keys: &[u64]) -> tracing::span::EnteredSpan {
    tracing::debug_span!("step_batch", slots = ?keys).entered()
}

impl Executor {
    fn run(mut self, rx: std_mpsc::Receiver<Command>) {
        loop {
            if self.state.is_empty() && self.sessions.is_empty() {
                match rx.recv() {
                    Ok(c) => self.command(c),
                    Err(_) => return,
                }
            }
            while let Ok(c) = rx.try_recv() {
                self.command(c);
            }
            let now = Instant::now();
            self.sessions.expire(now);
            let job = self.state.pick(now);
            let pick = if self.sessions.is_empty() {
                if job.is_some() {
                    Pick::Job
                } else {
                    Pick::Idle
                }
            } else {
                let jobs = match job {
                    Some(_) if self.sessions.jobs_owed() => Jobs::Owed,
                    Some(_) => Jobs::Ready,
                    None => Jobs::None,
                };
                Pacer::pick(now, &self.sessions.pace_inputs(), jobs, self.sessions.margin(), self.sessions.period())
            };
            match (pick, job) {
                (Pick::Session(i), job) => self.sessions.step(i, job.is_some()),
                (Pick::Job, Some(k)) => {
                    let t = Instant::now();
                    self.advance(k);
                    let dt = t.elapsed().as_secs_f64();
                    self.state.ran(t, dt);
                    self.sessions.observe_job_unit(t, dt);
                }
                (Pick::Wait(until), _) => {
                    if let Ok(c) = rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
                        self.command(c);
                    }
                }
                (Pick::Idle, _) if self.state.is_empty() => {}
                // Cannot happen (a lone request always fits), but never spin or die: wait for news.
                _ => match rx.recv() {
                    Ok(c) => self.command(c),
                    Err(_) => return,
                },
            }
            self.publish();
        }
    }

    fn publish(&self) {
        self.metrics.queue_depth.set(self.state.queued() as i64);
        self.metrics.in_flight.set(self.state.active() as i64);
        self.metrics.backlog_seconds.set(self.state.backlog_seconds());
    }

    fn command(&mut self, c: Command) {
        match c {
            Command::Submit(job) => {
                let k = self.next_key;
                self.next_key += 1;
                let priority = job.req.as_ref().expect("a submitted job carries its request").priority;
                self.state.add(k, priority, job.predicted, job.memory, job.submitted);
                self.keys.insert(job.id.clone(), k);
                self.jobs.insert(k, *job);
            }
            Command::Cancel(id) => {
                if let Some(k) = self.keys.get(&id).copied() {
                    self.fail(k, EngineError::Cancelled);
                }
            }
            Command::CancelAll => {
                let all: Vec<u64> = self.jobs.keys().copied().collect();
                for k in all {
                    self.fail(k, EngineError::Cancelled);
                }
            }
            Command::Session(c) => self.sessions.command(c),
            Command::Swap(spec, done) => {
                // Runs hold their own Arc: started requests keep the old pipeline.
                self.spec = spec;
                let _ = done.send(());
            }
        }
    }

    /// Ends a job without output; its state (tensors, plugin instances) is dropped here.
    fn fail(&mut self, k: u64, err: EngineError) {
        let Some(mut job) = self.jobs.remove(&k) else { return };
        self.state.remove(k);
        let id = std::mem::take(&mut job.id);
        self.keys.remove(&id);
        job.cancel.cancel();
        if let Some(mut run) = job.run.take() {
            // Observers that saw the request start hear how it ended; their events go out first.
            let outcome = if err == EngineError::Cancelled { "cancelled" } else { "failed" };
            let events = job.events.clone();
            let _ = catch_unwind(AssertUnwindSafe(|| run.abort(outcome, &mut |e| drop(events.send(e)))));
        }
        let (code, message) = match &err {
            EngineError::Failed { code, message } => (code.clone(), message.clone()),
            e => (e.code().to_string(), e.to_string()),
        };
        {
            let _e = job.span.enter();
            tracing::warn!(%code, %message, "request ended without output");
        }
        // Counted, released and published before the caller hears of it, so a caller that saw
        // the end sees the outcome counter, `live()` and the gauges with it.
        self.metrics.count(if err == EngineError::Cancelled { "cancelled" } else { "failed" });
        self.publish();
        self.shared.release(&id);
        let _ = job.events.send(OmniEvent::Error { request_id: id.clone(), code, message });
        if let Some(done) = job.done.take() {
            let _ = done.send(Err(err));
        }
    }

    /// Started requests whose next step can run in one call with `k`'s (same batch key).
    fn batch_partners(&self, k: u64) -> Vec<u64> {
        if self.max_batch < 2 {
            return Vec::new();
        }
        let Some(key) = self.jobs.get(&k).and_then(|j| j.run.as_ref()).and_then(|r| r.batch_key()) else {
            return Vec::new();
        };
        let mut partners: Vec<u64> = self
            .jobs
            .iter()
            .filter(|(o, j)| **o != k && j.run.as_ref().is_some_and(|r| r.batch_key() == Some(key)))
            .map(|(o, _)| *o)
            .collect();
        partners.sort_unstable();
        partners.truncate(self.max_batch - 1);
        partners
    }

    /// One step of `k` and its partners as one batched call.
    fn advance_batch(&mut self, k: u64, partners: Vec<u64>) {
        let keys: Vec<u64> = std::iter::once(k).chain(partners).collect();
        let mut jobs: Vec<Job> = keys.iter().map(|k| self.jobs.remove(k).expect("partners exist")).collect();
        let senders: Vec<mpsc::UnboundedSender<OmniEvent>> = jobs.iter().map(|j| j.events.clone()).collect();
        let t = Instant::now();
        let results = {
            let mut runs: Vec<&mut PipelineRun> = jobs.iter_mut().map(|j| j.run.as_mut().expect("started")).collect();
            let _e = jobs_span(&keys);
            catch_unwind(AssertUnwindSafe(|| PipelineRun::step_batch(&mut runs, &mut |i, e| drop(senders[i].send(e)))))
        };
        let n = keys.len();
        let per_request = t.elapsed().as_secs_f64() / n as f64;
        self.metrics.step_batch_size.observe(n as f64);
        let results: Vec<Result<(), EngineError>> = match results {
            Ok(rs) => rs
                .into_iter()
                .map(|r| {
                    r.map_err(|e| EngineError::Failed {
                        code: (self.classify)(&e).to_string(),
                        message: format!("{e:#}"),
                    })
                })
                .collect(),
            Err(p) => {
                let message = format!("batched step panicked: {}", fastvideo_torch::panic_message(p.as_ref()));
                (0..n)
                    .map(|_| Err(EngineError::Failed { code: "internal_error".into(), message: message.clone() }))
                    .collect()
            }
        };
        for ((k, mut job), r) in keys.into_iter().zip(jobs).zip(results) {
            match r {
                Ok(()) => {
                    let mut cost = self.shared.cost.lock().unwrap();
                    // The batch's time is shared: each request is charged its part.
                    cost.observe_step(&job.key, per_request);
                    job.steps_left = job.steps_left.saturating_sub(1);
                    let left = cost.remaining_seconds(&job.key, job.steps_left, job.one_shot_spent);
                    drop(cost);
                    self.metrics.step_seconds.observe(per_request * n as f64);
                    self.state.set_remaining(k, left);
                    self.jobs.insert(k, job);
                }
                Err(e) => {
                    self.jobs.insert(k, job);
                    self.fail(k, e);
                }
            }
        }
    }

    fn advance(&mut self, k: u64) {
        let partners = self.batch_partners(k);
        if !partners.is_empty() {
            return self.advance_batch(k, partners);
        }
        let job = self.jobs.get_mut(&k).expect("scheduled jobs exist");
        if job.run.is_none() {
            let req = job.req.take().expect("a queued job carries its request");
            self.metrics.queue_wait_seconds.observe(job.submitted.elapsed().as_secs_f64());
            job.run =
                Some(PipelineRun::new(self.spec.clone(), req, self.device, Values::default(), job.cancel.clone()));
        }
        let run = job.run.as_mut().expect("just started");
        let node = run.current_node().unwrap_or("finish").to_string();
        let steps_before = run.metrics().step_seconds.len();
        let events = job.events.clone();
        let t = Instant::now();
        let result = {
            let _e = job.span.enter();
            catch_unwind(AssertUnwindSafe(|| run.advance(&mut |e| drop(events.send(e)))))
        };
        let dt = t.elapsed().as_secs_f64();
        match result {
            Ok(Ok(Advance::Worked)) => {
                let mut cost = self.shared.cost.lock().unwrap();
                if run.metrics().step_seconds.len() > steps_before {
                    cost.observe_step(&job.key, dt);
                    self.metrics.step_seconds.observe(dt);
                    job.steps_left = job.steps_left.saturating_sub(1);
                } else {
                    job.one_shot_spent += dt;
                    self.metrics.one_shot_seconds.observe(dt);
                }
                let left = cost.remaining_seconds(&job.key, job.steps_left, job.one_shot_spent);
                drop(cost);
                self.state.set_remaining(k, left);
            }
            Ok(Ok(Advance::Finished)) => self.finish(k),
            Ok(Err(e)) => {
                let err = if job.cancel.is_cancelled() {
                    EngineError::Cancelled
                } else {
                    EngineError::Failed { code: (self.classify)(&e).to_string(), message: format!("{e:#}") }
                };
                self.fail(k, err);
            }
            Err(p) => {
                let message = format!("node `{node}` panicked: {}", fastvideo_torch::panic_message(p.as_ref()));
                self.fail(k, EngineError::Failed { code: "internal_error".into(), message });
            }
        }
    }

    fn finish(&mut self, k: u64) {
        let mut job = self.jobs.remove(&k).expect("finishing a known job");
        self.state.remove(k);
        let run = job.run.take().expect("a finished job has a run");
        let id = job.id.clone();
        self.keys.remove(&id);
        let events = job.events.clone();
        let out = {
            let _e = job.span.enter();
            catch_unwind(AssertUnwindSafe(|| run.finish(&mut |e| drop(events.send(e)))))
        };
        let result = match out {
            Ok(Ok(out)) => {
                self.shared.cost.lock().unwrap().observe_one_shot(&job.key, job.one_shot_spent);
                self.metrics.count("completed");
                Ok(out)
            }
            Ok(Err(e)) => Err(EngineError::Failed { code: (self.classify)(&e).to_string(), message: format!("{e:#}") }),
            Err(p) => Err(EngineError::Failed {
                code: "internal_error".into(),
                message: format!("collecting outputs panicked: {}", fastvideo_torch::panic_message(p.as_ref())),
            }),
        };
        match result {
            Ok(out) => {
                self.publish();
                self.shared.release(&id);
                if let Some(done) = job.done.take() {
                    let _ = done.send(Ok(out));
                }
            }
            Err(err) => {
                // Put it back so `fail` reports it like any other failure.
                self.keys.insert(id, k);
                self.jobs.insert(k, job);
                self.fail(k, err);
            }
        }
    }
}
