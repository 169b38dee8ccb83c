//! The executor's side of sessions: the live list, their commands, one unit of a session, and
//! the pool gauges. Each session is a [`PipelineRun`] of the session model's pipeline; its
//! actions go into the run's [`ActionInbox`], and closing it closes the inbox, so the loop node
//! ends, the run finishes and its observers hear the end as they do for a job.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fastvideo_pipeline::session::{ActionInbox, SessionModel, ACTIONS};
use fastvideo_pipeline::{AdapterSet, Advance, CancelToken, PipelineRun, Value, Values};
use fastvideo_request::{ActionPart, OmniEvent, RequestError, ResolvedRequest, VideoArtifact};
use tch::Device;
use tokio::sync::{mpsc, oneshot};

use super::info::{SessionChunk, SessionEvent, SessionInfo, Unread};
use crate::scheduler::Deadlines;
use crate::{EngineError, Metrics};

/// Chunks a session's stream may hold unread before chunks are dropped (a slow viewer).
pub const STREAM_BUFFER_CHUNKS: usize = 8;
/// Plugin events a session's stream holds besides its chunks (an observer reporting every step
/// of the chunks made before a client connects); past that they are dropped.
pub const STREAM_BUFFER_EVENTS: usize = 512;

/// Units a closing session may take to end (the step that sees the inbox closed, `finalize`,
/// and slack); none of them runs the model.
const CLOSING_UNITS: usize = 4;

pub(crate) enum SessionCommand {
    Open {
        /// The session as a request (`task: world`), resolved and checked by the front.
        request: Box<ResolvedRequest>,
        /// Its LoRA adapters, prepared by the front.
        adapters: Option<Arc<AdapterSet>>,
        events: mpsc::Sender<SessionEvent>,
        reply: oneshot::Sender<Result<(), EngineError>>,
    },
    Action {
        id: String,
        action: ActionPart,
    },
    Close {
        id: String,
        reason: String,
    },
    Streaming {
        id: String,
        on: bool,
    },
    /// The client's sender dropped this many frames it had not shown (stale after an action).
    Skipped {
        id: String,
        frames: u64,
    },
}

/// What the front reads without asking the executor.
#[derive(Default)]
pub(crate) struct SessionShared {
    pub info: Mutex<HashMap<String, SessionInfo>>,
}

struct Live {
    /// The session's key in the scheduler's deadlines.
    key: u64,
    id: String,
    run: PipelineRun,
    inbox: ActionInbox,
    events: mpsc::Sender<SessionEvent>,
    unread: Unread,
    info: SessionInfo,
    last_activity: Instant,
    streaming: bool,
}

/// A finished chunk as the loop node emitted it.
struct ChunkParts {
    index: u64,
    first_frame: u64,
    action_id: u64,
    video: VideoArtifact,
}

/// How a session ends.
enum End {
    /// Closed or expired: the inbox closes and the run finishes (observers hear `completed`).
    Close,
    /// A unit failed; the run already told its observers.
    Failed,
    /// A unit panicked: observers hear `failed` here.
    Panicked,
}

/// The live sessions' runs and streams. Their pacing (chunk deadlines against the jobs) is the
/// scheduler's ([`Deadlines`]), told of every open, unit, chunk, action and close here.
pub(crate) struct LiveSessions {
    model: Option<Arc<dyn SessionModel>>,
    device: Device,
    list: Vec<Live>,
    next_key: u64,
    idle: Duration,
    shared: Arc<SessionShared>,
    metrics: Metrics,
}

/// Forwards a unit's plugin events to the session's stream (a full stream drops them, as it
/// drops chunks: the viewer is behind).
fn forward_plugin_events(events: &mpsc::Sender<SessionEvent>, evs: &mut Vec<OmniEvent>) {
    for e in evs.drain(..) {
        if matches!(e, OmniEvent::Plugin { .. }) {
            let _ = events.try_send(SessionEvent::Plugin(e));
        }
    }
}

impl LiveSessions {
    pub fn new(
        model: Option<Arc<dyn SessionModel>>,
        device: Device,
        idle: Duration,
        shared: Arc<SessionShared>,
        metrics: Metrics,
    ) -> Self {
        let live = Self { model, device, list: Vec::new(), next_key: 0, idle, shared, metrics };
        live.publish_pool();
        live
    }

    /// The model's key/value pool occupancy in the gauges (at start, after a chunk, and after a
    /// session returned its slabs).
    fn publish_pool(&self) {
        if let Some(st) = self.model.as_ref().and_then(|m| m.kv_stats()) {
            self.metrics.kv_slabs_capacity.set(st.capacity_slabs as i64);
            self.metrics.kv_slabs_used.set(st.used_slabs as i64);
            self.metrics.kv_evictions.set(st.evictions as i64);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The session model's frame rate (16 without one), for the scheduler's deadlines.
    pub fn fps(&self) -> u32 {
        self.model.as_ref().map_or(16, |m| m.fps())
    }

    /// The session model's frames per chunk (4 without one), for the scheduler's deadlines.
    pub fn frames_per_chunk(&self) -> u32 {
        self.model.as_ref().map_or(4, |m| m.frames_per_chunk())
    }

    /// Ends session `i`: a closed one runs to its end (the step that sees the inbox closed,
    /// `finalize`, the run's finish), so its observers hear it end and their last events go out
    /// before `Closed`; then its state, slabs included, is dropped.
    fn end(&mut self, i: usize, reason: String, how: End, pace: &mut Deadlines) {
        let Live { key, id, mut run, inbox, events, info, .. } = self.list.swap_remove(i);
        pace.close(key);
        let mut evs = Vec::new();
        match how {
            End::Close => {
                inbox.close();
                let ended = catch_unwind(AssertUnwindSafe(|| -> anyhow::Result<()> {
                    for _ in 0..CLOSING_UNITS {
                        if run.advance(&mut |e| evs.push(e))? == Advance::Finished {
                            run.finish(&mut |e| evs.push(e))?;
                            return Ok(());
                        }
                    }
                    anyhow::bail!("the session did not end within {CLOSING_UNITS} units of being closed")
                }));
                match ended {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => tracing::warn!(session = %id, error = %format!("{e:#}"), "closing the session"),
                    Err(_) => tracing::warn!(session = %id, "closing the session panicked"),
                }
            }
            End::Failed => {}
            End::Panicked => run.abort("failed", &mut |e| evs.push(e)),
        }
        forward_plugin_events(&events, &mut evs);
        let _ = events.try_send(SessionEvent::Closed { reason: reason.clone() });
        self.shared.info.lock().unwrap().remove(&id);
        self.metrics.sessions_live.set(self.list.len() as i64);
        tracing::info!(session = %id, %reason, chunks = info.chunks, late = info.late_chunks, "session closed");
        // The run (if not consumed by its finish) and the rollout in it return their key/value
        // slabs as they drop; then the pool's gauges are read.
        drop(events);
        self.publish_pool();
    }

    fn open(
        &mut self,
        request: ResolvedRequest,
        adapters: Option<Arc<AdapterSet>>,
        events: mpsc::Sender<SessionEvent>,
        pace: &mut Deadlines,
    ) -> Result<(), EngineError> {
        let Some(model) = self.model.clone() else { return Err(EngineError::NoSessions) };
        let id = request.request_id.clone();
        let inbox = ActionInbox::default();
        let mut values = Values::default();
        values.insert(ACTIONS, Value::Inbox(inbox.clone()));
        if let Some(set) = adapters {
            values.insert(fastvideo_pipeline::ADAPTERS, Value::Adapters(set));
        }
        let mut run = PipelineRun::new(model.pipeline(), request, self.device, values, CancelToken::default());
        // The first unit opens the session (its observers, the rollout's slabs, its first frame
        // or prompt), so what can go wrong at the start is the open's answer.
        let mut evs = Vec::new();
        match catch_unwind(AssertUnwindSafe(|| run.advance(&mut |e| evs.push(e)))) {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(RequestError::new("session", format!("{e:#}")).into()),
            Err(_) => {
                return Err(EngineError::Failed {
                    code: "internal_error".into(),
                    message: "opening the session panicked".into(),
                })
            }
        }
        forward_plugin_events(&events, &mut evs);
        let now = Instant::now();
        let key = self.next_key;
        self.next_key += 1;
        pace.open(key, model.units_per_chunk(), now);
        let live = Live {
            key,
            info: SessionInfo { id: id.clone(), chunks: 0, frames: 0, last_action_id: 0, late_chunks: 0 },
            id,
            run,
            inbox,
            events,
            unread: Unread::default(),
            last_activity: now,
            streaming: false,
        };
        self.shared.info.lock().unwrap().insert(live.id.clone(), live.info.clone());
        self.list.push(live);
        self.metrics.sessions_live.set(self.list.len() as i64);
        Ok(())
    }

    pub fn command(&mut self, c: SessionCommand, pace: &mut Deadlines) {
        match c {
            SessionCommand::Open { request, adapters, events, reply } => {
                let _ = reply.send(self.open(*request, adapters, events, pace));
            }
            SessionCommand::Action { id, action } => {
                if let Some(l) = self.list.iter_mut().find(|l| l.id == id) {
                    l.inbox.push(action);
                    l.last_activity = Instant::now();
                    pace.action(l.key);
                }
            }
            SessionCommand::Close { id, reason } => {
                if let Some(i) = self.list.iter().position(|l| l.id == id) {
                    self.end(i, reason, End::Close, pace);
                }
            }
            SessionCommand::Streaming { id, on } => {
                if let Some(l) = self.list.iter_mut().find(|l| l.id == id) {
                    l.streaming = on;
                    l.last_activity = Instant::now();
                }
            }
            SessionCommand::Skipped { id, frames } => {
                if let Some(l) = self.list.iter().find(|l| l.id == id) {
                    pace.skipped(l.key, frames);
                }
            }
        }
    }

    /// Closes sessions nobody has streamed or acted on for the idle timeout.
    pub fn expire(&mut self, now: Instant, pace: &mut Deadlines) {
        while let Some(i) =
            self.list.iter().position(|l| !l.streaming && now.duration_since(l.last_activity) > self.idle)
        {
            let secs = self.idle.as_secs();
            self.end(i, format!("expired: no stream and no action for {secs} s"), End::Close, pace);
        }
    }

    /// A finished chunk of session `i`: its deadline, counters and gauges, then its stream.
    /// Returns why the session must end (its client went away), if it must.
    fn chunk_done(&mut self, i: usize, chunk: ChunkParts, pace: &mut Deadlines) -> Option<String> {
        let ChunkParts { index, first_frame, action_id, video } = chunk;
        self.metrics.session_chunks.inc();
        self.publish_pool();
        let l = &mut self.list[i];
        if pace.chunk_done(l.key, Instant::now()) {
            l.info.late_chunks += 1;
            self.metrics.session_late_chunks.inc();
        }
        l.info.chunks += 1;
        l.info.frames += video.num_frames as u64;
        l.info.last_action_id = action_id;
        // Updated, never re-added: the front may have closed it already.
        if let Some(e) = self.shared.info.lock().unwrap().get_mut(&l.id) {
            *e = l.info.clone();
        }
        if l.events.is_closed() {
            return Some("the client went away".to_string());
        }
        // A slow viewer: this chunk is dropped, the session goes on.
        if l.unread.count() >= STREAM_BUFFER_CHUNKS {
            self.metrics.session_dropped_chunks.inc();
            return None;
        }
        let chunk = SessionChunk { index, first_frame, video, action_id, _hold: l.unread.hold() };
        match l.events.try_send(SessionEvent::Chunk(chunk)) {
            Ok(()) => None,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.metrics.session_dropped_chunks.inc();
                None
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Some("the client went away".to_string()),
        }
    }

    /// One unit of the session with scheduler key `key`; `jobs_waiting`: job units were ready
    /// and waited for it.
    pub fn step(&mut self, key: u64, jobs_waiting: bool, pace: &mut Deadlines) {
        let Some(i) = self.list.iter().position(|l| l.key == key) else {
            // Gone already (its end told the deadlines too); nothing to run.
            pace.close(key);
            return;
        };
        let t = Instant::now();
        let mut evs = Vec::new();
        let run = &mut self.list[i].run;
        let result = catch_unwind(AssertUnwindSafe(|| run.advance(&mut |e| evs.push(e))));
        pace.ran(key, t, t.elapsed().as_secs_f64(), jobs_waiting);
        let mut ending = match result {
            Ok(Ok(Advance::Worked)) => None,
            // The loop ended by itself (its inbox was closed): finish it as a close.
            Ok(Ok(Advance::Finished)) => Some(("closed".to_string(), End::Close)),
            Ok(Err(e)) => Some((format!("failed: {e:#}"), End::Failed)),
            Err(_) => Some(("failed: a session step panicked".to_string(), End::Panicked)),
        };
        for e in evs {
            match e {
                OmniEvent::Chunk { index, first_frame, action_id, video, .. } => {
                    let chunk = ChunkParts { index, first_frame, action_id, video };
                    if let Some(reason) = self.chunk_done(i, chunk, pace) {
                        ending = ending.or(Some((reason, End::Close)));
                    }
                }
                e @ OmniEvent::Plugin { .. } => {
                    let _ = self.list[i].events.try_send(SessionEvent::Plugin(e));
                }
                _ => {}
            }
        }
        if let Some((reason, how)) = ending {
            self.end(i, reason, how, pace);
        }
    }
}

#[cfg(test)]
mod tests {
    use fastvideo_pipeline::{
        LoopStage, LoopState, Node, NodeCtx, Observed, Observer, ObserverState, PipelineSpec, PluginMeter, StepCtx,
        StepResult,
    };
    use fastvideo_request::{Defaults, ModelLimits, OmniRequest, SamplerKind, TaskType};

    use super::*;
    use crate::session::SessionRequest;

    /// A session loop that makes a one-frame chunk every second step, echoing the last action's id.
    struct Toy;
    struct ToyState {
        inbox: ActionInbox,
        action: u64,
        chunks: u64,
    }

    impl LoopStage for Toy {
        fn init(&self, _: &NodeCtx, values: &mut Values) -> anyhow::Result<LoopState> {
            let inbox = values.inbox(ACTIONS)?.clone();
            Ok(LoopState { step: 0, total_steps: u32::MAX, inner: Box::new(ToyState { inbox, action: 0, chunks: 0 }) })
        }
        fn step(&self, ctx: &NodeCtx, state: &mut LoopState) -> anyhow::Result<StepResult> {
            let odd = state.step % 2 == 1;
            let s: &mut ToyState = state.get_mut()?;
            if s.inbox.is_closed() {
                return Ok(StepResult { done: true, ..Default::default() });
            }
            if let Some(a) = s.inbox.take().last() {
                s.action = a.id.unwrap_or(0);
            }
            let mut r = StepResult::default();
            if odd {
                let video =
                    fastvideo_request::VideoArtifact { fps: 16, num_frames: 1, height: 1, width: 1, rgb: vec![0; 3] };
                r.emit.push(OmniEvent::Chunk {
                    request_id: ctx.request.request_id.clone(),
                    index: s.chunks,
                    first_frame: s.chunks,
                    action_id: s.action,
                    video,
                });
                s.chunks += 1;
            }
            Ok(r)
        }
        fn finalize(&self, _: &NodeCtx, _: LoopState, values: &mut Values) -> anyhow::Result<()> {
            values.insert("chunks", Value::Tensor(tch::Tensor::from(0i64)));
            Ok(())
        }
        fn step_ctx<'a>(&self, ctx: &NodeCtx<'a>, state: &LoopState) -> Option<StepCtx<'a>> {
            Some(StepCtx {
                request: ctx.request,
                step_index: state.step % 2,
                num_steps: 2,
                timestep: 0.0,
                sigma: 0.0,
                sigma_next: 0.0,
            })
        }
    }

    /// Counts the steps of its own session and reports the count when the session ends.
    struct StepCounter;
    struct Count(u32);
    impl Observer for StepCounter {
        fn init(&self, _: &ResolvedRequest, _: &PluginMeter) -> anyhow::Result<Box<dyn ObserverState>> {
            Ok(Box::new(Count(0)))
        }
    }
    impl ObserverState for Count {
        fn on_event(
            &mut self,
            event: Observed,
            _: Option<&tch::Tensor>,
            emit: &mut dyn FnMut(OmniEvent),
        ) -> anyhow::Result<()> {
            match event {
                Observed::StepEnd(ctx) => {
                    self.0 += 1;
                    emit(OmniEvent::Plugin {
                        request_id: ctx.request.request_id.clone(),
                        plugin: "counter".into(),
                        name: "step".into(),
                        payload: self.0.into(),
                    });
                }
                Observed::RequestEnd(outcome) => emit(OmniEvent::Plugin {
                    request_id: String::new(),
                    plugin: "counter".into(),
                    name: outcome.into(),
                    payload: self.0.into(),
                }),
                _ => {}
            }
            Ok(())
        }
    }

    struct Model(Arc<PipelineSpec>);

    impl SessionModel for Model {
        fn id(&self) -> &str {
            "m"
        }
        fn actions(&self) -> Vec<String> {
            vec!["none".into()]
        }
        fn fps(&self) -> u32 {
            16
        }
        fn frames_per_chunk(&self) -> u32 {
            4
        }
        fn frame_size(&self) -> (u32, u32) {
            (8, 8)
        }
        fn units_per_chunk(&self) -> u32 {
            2
        }
        fn pipeline(&self) -> Arc<PipelineSpec> {
            self.0.clone()
        }
        fn request(&self, id: &str, req: &SessionRequest) -> Result<ResolvedRequest, RequestError> {
            let limits = ModelLimits {
                family: "toy".into(),
                tasks: vec![TaskType::World],
                image_roles: Vec::new(),
                frame_multiple: 1,
                spatial_multiple: 1,
                max_frames: 1,
                max_side: 8,
                max_steps: 2,
                defaults: Defaults {
                    steps: 2,
                    guidance_scale: 1.0,
                    shift: 1.0,
                    height: 8,
                    width: 8,
                    num_frames: 1,
                    fps: 16,
                    sampler: SamplerKind::Euler,
                    negative_prompt: String::new(),
                },
            };
            let mut r = OmniRequest::text_to_video(id, "toy");
            r.task = TaskType::World;
            r.resolve(&limits, || req.seed)
        }
    }

    fn sessions() -> (LiveSessions, Arc<dyn SessionModel>) {
        let nodes = vec![Node::looped("rollout", Arc::new(Toy), &[ACTIONS], &["chunks"])];
        let spec = PipelineSpec::new("toy-session", vec![TaskType::World], nodes, &[ACTIONS], "chunks")
            .unwrap()
            .with_observers(vec![Arc::new(StepCounter)]);
        let model: Arc<dyn SessionModel> = Arc::new(Model(Arc::new(spec)));
        let metrics = Metrics::register(&mut prometheus_client::registry::Registry::default());
        let live =
            LiveSessions::new(Some(model.clone()), Device::Cpu, Duration::from_secs(60), Default::default(), metrics);
        (live, model)
    }

    fn open(
        live: &mut LiveSessions,
        pace: &mut Deadlines,
        model: &Arc<dyn SessionModel>,
        id: &str,
    ) -> mpsc::Receiver<SessionEvent> {
        let (events, rx) = mpsc::channel(64);
        let (reply, mut answer) = oneshot::channel();
        let request = model.request(id, &SessionRequest::default()).unwrap();
        live.command(SessionCommand::Open { request: Box::new(request), adapters: None, events, reply }, pace);
        answer.try_recv().unwrap().unwrap();
        rx
    }

    /// What a session's stream carried.
    #[derive(Default)]
    struct Seen {
        /// Each chunk's action id.
        chunks: Vec<u64>,
        /// The counter's step events.
        steps: Vec<u64>,
        /// The counter's end event: (outcome, steps).
        end: Option<(String, u64)>,
        closed: Option<String>,
    }

    fn drain(rx: &mut mpsc::Receiver<SessionEvent>) -> Seen {
        let Seen { mut chunks, mut steps, mut end, mut closed } = Seen::default();
        while let Ok(e) = rx.try_recv() {
            match e {
                SessionEvent::Chunk(c) => chunks.push(c.action_id),
                SessionEvent::Plugin(OmniEvent::Plugin { name, payload, .. }) if name == "step" => {
                    steps.push(payload.as_u64().unwrap())
                }
                SessionEvent::Plugin(OmniEvent::Plugin { name, payload, .. }) => {
                    end = Some((name, payload.as_u64().unwrap()))
                }
                SessionEvent::Plugin(_) => {}
                SessionEvent::Closed { reason } => closed = Some(reason),
            }
        }
        Seen { chunks, steps, end, closed }
    }

    #[test]
    fn sessions_run_as_pipeline_runs_with_per_session_observers_and_their_end_before_closed() {
        let (mut live, model) = sessions();
        let mut pace = Deadlines::new(16, 4, 0.25);
        let mut a = open(&mut live, &mut pace, &model, "a");
        let mut b = open(&mut live, &mut pace, &model, "b");
        // Interleaved by scheduler key: a (0), b (1), a, b, a, a (a: 4 steps = 2 chunks, b: 2
        // steps = 1 chunk).
        for key in [0, 1, 0, 1] {
            live.step(key, false, &mut pace);
        }
        live.command(SessionCommand::Action { id: "a".into(), action: ActionPart::key("none", 7) }, &mut pace);
        live.step(0, false, &mut pace);
        live.step(0, false, &mut pace);
        live.command(SessionCommand::Close { id: "a".into(), reason: "closed by the client".into() }, &mut pace);
        live.command(SessionCommand::Close { id: "b".into(), reason: "bye".into() }, &mut pace);
        assert!(pace.is_empty(), "closed sessions leave the scheduler's deadlines");
        assert!(live.is_empty());
        let Seen { chunks, steps, end, closed } = drain(&mut a);
        assert_eq!(chunks, [0, 7], "the action reached the loop through the inbox");
        // Each session's observer has its own state: its counts are its own steps (the 5th is
        // the step that found the inbox closed).
        assert_eq!(steps, [1, 2, 3, 4, 5]);
        // Closing ends the run: the observer hears `completed` before the stream says closed.
        assert_eq!(end, Some(("completed".to_string(), 5)));
        assert_eq!(closed.as_deref(), Some("closed by the client"));
        let Seen { chunks, steps, end, closed } = drain(&mut b);
        assert_eq!((chunks.len(), steps, end), (1, vec![1, 2, 3], Some(("completed".to_string(), 3))));
        assert_eq!(closed.as_deref(), Some("bye"));
    }
}
