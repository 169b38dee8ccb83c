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

    /// The session model, if the engine serves one.
    pub fn model(&self) -> Option<&Arc<dyn SessionModel>> {
        self.model.as_ref()
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
mod tests;
