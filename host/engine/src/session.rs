//! Live world-model sessions in the engine. A session is an open-ended rollout: the executor
//! runs its units (a denoise step or a commit pass of the current chunk) between the units of
//! ordinary jobs, with a deadline per chunk so the session keeps its frame rate while jobs run.
//!
//! The model side is behind [`SessionModel`] / [`SessionRun`] (the world model implements them),
//! so the engine stays model-agnostic. [`Pacer`] is the scheduling rule alone, unit-tested
//! without a model.

use std::time::{Duration, Instant};

use fastvideo_request::{ActionPart, RequestError, VideoArtifact};
use serde::Serialize;

/// What a client asks for when it opens a session.
#[derive(Debug, Clone, Default)]
pub struct SessionRequest {
    /// Text conditioning; the model's own when `None`.
    pub prompt: Option<String>,
    /// Start from the model's simulator frame for this seed (models that have one), else generate.
    pub start_seed: Option<u64>,
    pub seed: u64,
    /// Latent frames of context (at most the model's); the model's when `None`.
    pub window: Option<usize>,
}

/// A finished chunk of a session.
pub struct SessionChunk {
    pub index: u64,
    /// Index of the chunk's first video frame in the session (its presentation time is
    /// `first_frame / fps`).
    pub first_frame: u64,
    pub video: VideoArtifact,
    /// The caller's id of the action the chunk was generated under (0: none yet).
    pub action_id: u64,
}

/// What a session's stream carries.
pub enum SessionEvent {
    Chunk(SessionChunk),
    /// The session ended: closed, expired, or failed (`reason` says which and why).
    Closed {
        reason: String,
    },
}

/// One session's model side; its state (key/value slabs, decoder cache) is dropped with it.
pub trait SessionRun: Send {
    /// Runs one unit; returns the chunk when this unit finished one.
    fn step(&mut self) -> anyhow::Result<Option<SessionChunk>>;
    /// An action (checked against the model's keys already): from its `from_frame`, or the
    /// first chunk not yet committed.
    fn set_action(&mut self, action: &ActionPart);
    /// Units per chunk (denoise steps plus the commit pass), for pacing.
    fn units_per_chunk(&self) -> u32;
}

/// A model that can run sessions.
pub trait SessionModel: Send + Sync {
    fn id(&self) -> &str;
    /// The action keys it takes.
    fn actions(&self) -> Vec<String>;
    /// Whether it takes continuous deltas (`ActionPart::delta`) too.
    fn continuous_actions(&self) -> bool {
        false
    }
    fn fps(&self) -> u32;
    /// Video frames per chunk after the first.
    fn frames_per_chunk(&self) -> u32;
    /// `(width, height)` of the frames.
    fn frame_size(&self) -> (u32, u32);
    /// Opens a session (reserving its key/value slabs); errors name the field.
    fn open(&self, req: &SessionRequest) -> Result<Box<dyn SessionRun>, RequestError>;
}

/// Where a session stands, for `GET /v1/sessions/{id}`.
#[derive(Debug, Clone, Serialize)]
pub struct SessionInfo {
    pub id: String,
    pub chunks: u64,
    pub frames: u64,
    pub last_action_id: u64,
    /// Chunks that were finished later than their deadline.
    pub late_chunks: u64,
}

/// The pacing rule. A session's chunk `n` is due at `start + n × period`; a session is urgent
/// when the units its chunk still needs, at the measured cost per unit, plus `margin` (the
/// longest job unit seen, which cannot be interrupted) would reach the deadline. Jobs that are
/// owed their floor share ([`crate::share::Share`]) run first; then urgent sessions (earliest deadline first),
/// then jobs, then sessions that are less than one period ahead of real time; otherwise the
/// executor waits for the next session to become urgent.
#[derive(Debug, Clone, Copy)]
pub struct PaceInput {
    pub due: Instant,
    pub units_left: u32,
    pub unit_seconds: f64,
    /// A new action is waiting for this session's next chunk: run it now, whatever the deadline
    /// (at most one chunk early per action), so the action shows as soon as it can.
    pub eager: bool,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pick {
    /// Run a unit of session `i` (index into the input).
    Session(usize),
    /// Run a job unit.
    Job,
    /// Nothing to do before this instant.
    Wait(Instant),
    /// No sessions and no jobs.
    Idle,
}

/// Whether job units are waiting, and whether they are owed their floor share.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Jobs {
    None,
    Ready,
    /// Ready, and jobs had less than their floor share of the executor lately.
    Owed,
}

pub struct Pacer;

impl Pacer {
    pub fn pick(now: Instant, sessions: &[PaceInput], jobs: Jobs, margin: f64, period: Duration) -> Pick {
        if jobs == Jobs::Owed {
            return Pick::Job;
        }
        let jobs_ready = jobs != Jobs::None;
        let start_by = |s: &PaceInput| {
            let need = Duration::from_secs_f64((s.units_left as f64 * s.unit_seconds + margin).max(0.0));
            s.due.checked_sub(need).unwrap_or(now)
        };
        let urgent = sessions
            .iter()
            .enumerate()
            .filter(|(_, s)| s.eager || start_by(s) <= now)
            .min_by_key(|(_, s)| s.due)
            .map(|(i, _)| i);
        if let Some(i) = urgent {
            return Pick::Session(i);
        }
        if jobs_ready {
            return Pick::Job;
        }
        // Work ahead, but at most one period: frames are shown in real time anyway.
        let ahead = sessions
            .iter()
            .enumerate()
            .filter(|(_, s)| s.due <= now + period)
            .min_by_key(|(_, s)| s.due)
            .map(|(i, _)| i);
        if let Some(i) = ahead {
            return Pick::Session(i);
        }
        match sessions.iter().map(|s| start_by(s).min(s.due.checked_sub(period).unwrap_or(now))).min() {
            Some(t) => Pick::Wait(t),
            None => Pick::Idle,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(now: Instant, due_ms: u64, units: u32) -> PaceInput {
        PaceInput { due: now + Duration::from_millis(due_ms), units_left: units, unit_seconds: 0.01, eager: false }
    }

    const P: Duration = Duration::from_millis(250);

    #[test]
    fn an_urgent_session_goes_before_jobs_and_the_earliest_deadline_first() {
        let now = Instant::now();
        // 5 units of 10 ms + 100 ms margin = 150 ms: due in 120 ms is urgent, in 400 ms is not.
        let sessions = [s(now, 400, 5), s(now, 120, 5), s(now, 100, 5)];
        assert_eq!(Pacer::pick(now, &sessions, Jobs::Ready, 0.1, P), Pick::Session(2));
        assert_eq!(Pacer::pick(now, &sessions[..1], Jobs::Ready, 0.1, P), Pick::Job);
        // A session with a fresh action runs now, even far ahead of its deadline.
        let eager = PaceInput { eager: true, ..s(now, 900, 5) };
        assert_eq!(Pacer::pick(now, &[eager], Jobs::Ready, 0.1, P), Pick::Session(0));
    }

    #[test]
    fn without_jobs_sessions_work_at_most_one_period_ahead_then_wait() {
        let now = Instant::now();
        assert_eq!(Pacer::pick(now, &[s(now, 200, 5)], Jobs::None, 0.0, P), Pick::Session(0));
        match Pacer::pick(now, &[s(now, 600, 5)], Jobs::None, 0.0, P) {
            // Waits until one period before the deadline (350 ms from now).
            Pick::Wait(t) => assert_eq!(t, now + Duration::from_millis(350)),
            other => panic!("{other:?}"),
        }
        assert_eq!(Pacer::pick(now, &[], Jobs::None, 0.0, P), Pick::Idle);
        assert_eq!(Pacer::pick(now, &[], Jobs::Ready, 0.0, P), Pick::Job);
    }

    #[test]
    fn jobs_owed_their_floor_go_before_urgent_sessions() {
        let now = Instant::now();
        let late = [s(now, 0, 5), s(now, 10, 5)];
        assert_eq!(Pacer::pick(now, &late, Jobs::Ready, 0.1, P), Pick::Session(0));
        assert_eq!(Pacer::pick(now, &late, Jobs::Owed, 0.1, P), Pick::Job);
    }
}

// ---- The executor's side -------------------------------------------------------------------

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot};

use crate::share::Share;
use crate::{EngineError, Metrics};

/// Frames a session's stream may hold unread before chunks are dropped (a slow viewer).
pub const STREAM_BUFFER_CHUNKS: usize = 8;

pub(crate) enum SessionCommand {
    Open {
        id: String,
        req: SessionRequest,
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
    id: String,
    run: Box<dyn SessionRun>,
    events: mpsc::Sender<SessionEvent>,
    start: Instant,
    units_per_chunk: u32,
    units_done: u32,
    unit_seconds: f64,
    info: SessionInfo,
    last_activity: Instant,
    streaming: bool,
    /// An action arrived since the last finished chunk.
    eager: bool,
}

pub(crate) struct LiveSessions {
    model: Option<Arc<dyn SessionModel>>,
    list: Vec<Live>,
    period: Duration,
    frames_per_chunk: u32,
    /// The longest job unit lately (decaying), which a session deadline must allow for.
    margin: f64,
    /// Time lately on sessions vs jobs, and the jobs' floor share of it.
    share: Share,
    job_floor: f64,
    idle: Duration,
    shared: Arc<SessionShared>,
    metrics: Metrics,
}

impl LiveSessions {
    pub fn new(
        model: Option<Arc<dyn SessionModel>>,
        idle: Duration,
        job_floor: f64,
        shared: Arc<SessionShared>,
        metrics: Metrics,
    ) -> Self {
        let frames_per_chunk = model.as_ref().map_or(4, |m| m.frames_per_chunk().max(1));
        let period = model
            .as_ref()
            .map(|m| Duration::from_secs_f64(frames_per_chunk as f64 / m.fps().max(1) as f64))
            .unwrap_or(Duration::from_millis(250));
        Self {
            model,
            list: Vec::new(),
            period,
            frames_per_chunk,
            margin: 0.0,
            share: Share::new(Instant::now()),
            job_floor,
            idle,
            shared,
            metrics,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn period(&self) -> Duration {
        self.period
    }

    pub fn margin(&self) -> f64 {
        self.margin
    }

    /// Feeds a job unit's time into the margin (the max, decaying 5 % a unit) and the share.
    pub fn observe_job_unit(&mut self, start: Instant, seconds: f64) {
        self.margin = (self.margin * 0.95).max(seconds);
        self.share.add(start, seconds, true);
    }

    /// Jobs have had less than their floor share of the executor lately, while they waited.
    pub fn jobs_owed(&self) -> bool {
        self.share.favoured_fraction() < self.job_floor
    }

    pub fn pace_inputs(&self) -> Vec<PaceInput> {
        self.list
            .iter()
            .map(|l| PaceInput {
                due: l.start + self.period.mul_f64(l.info.chunks as f64),
                units_left: l.units_per_chunk.saturating_sub(l.units_done),
                unit_seconds: l.unit_seconds,
                eager: l.eager,
            })
            .collect()
    }

    fn remove(&mut self, i: usize, reason: String) {
        let l = self.list.swap_remove(i);
        let _ = l.events.try_send(SessionEvent::Closed { reason: reason.clone() });
        self.shared.info.lock().unwrap().remove(&l.id);
        self.metrics.sessions_live.set(self.list.len() as i64);
        tracing::info!(session = %l.id, %reason, chunks = l.info.chunks, late = l.info.late_chunks, "session closed");
        // Dropping `l.run` returns its key/value slabs.
    }

    pub fn command(&mut self, c: SessionCommand) {
        match c {
            SessionCommand::Open { id, req, events, reply } => {
                let Some(model) = self.model.clone() else {
                    let _ = reply.send(Err(EngineError::NoSessions));
                    return;
                };
                match catch_unwind(AssertUnwindSafe(|| model.open(&req))) {
                    Ok(Ok(run)) => {
                        let now = Instant::now();
                        let units_per_chunk = run.units_per_chunk().max(1);
                        let live = Live {
                            info: SessionInfo {
                                id: id.clone(),
                                chunks: 0,
                                frames: 0,
                                last_action_id: 0,
                                late_chunks: 0,
                            },
                            id,
                            run,
                            events,
                            start: now,
                            units_per_chunk,
                            units_done: 0,
                            unit_seconds: 0.0,
                            last_activity: now,
                            streaming: false,
                            eager: false,
                        };
                        self.shared.info.lock().unwrap().insert(live.id.clone(), live.info.clone());
                        self.list.push(live);
                        self.metrics.sessions_live.set(self.list.len() as i64);
                        let _ = reply.send(Ok(()));
                    }
                    Ok(Err(e)) => {
                        let _ = reply.send(Err(e.into()));
                    }
                    Err(_) => {
                        let _ = reply.send(Err(EngineError::Failed {
                            code: "internal_error".into(),
                            message: "opening the session panicked".into(),
                        }));
                    }
                }
            }
            SessionCommand::Action { id, action } => {
                if let Some(l) = self.list.iter_mut().find(|l| l.id == id) {
                    l.run.set_action(&action);
                    l.last_activity = Instant::now();
                    l.eager = true;
                }
            }
            SessionCommand::Close { id, reason } => {
                if let Some(i) = self.list.iter().position(|l| l.id == id) {
                    self.remove(i, reason);
                }
            }
            SessionCommand::Streaming { id, on } => {
                if let Some(l) = self.list.iter_mut().find(|l| l.id == id) {
                    l.streaming = on;
                    l.last_activity = Instant::now();
                }
            }
            // Frames made but never shown leave a hole in what the client plays: the schedule
            // moves that much earlier, so the next chunks come sooner and fill it (else every
            // skip is a stall of that length on screen).
            SessionCommand::Skipped { id, frames } => {
                let shift = self.period.mul_f64(frames as f64 / self.frames_per_chunk as f64);
                if let Some(l) = self.list.iter_mut().find(|l| l.id == id) {
                    l.start = l.start.checked_sub(shift).unwrap_or(l.start);
                }
            }
        }
    }

    /// Closes sessions nobody has streamed or acted on for the idle timeout.
    pub fn expire(&mut self, now: Instant) {
        while let Some(i) =
            self.list.iter().position(|l| !l.streaming && now.duration_since(l.last_activity) > self.idle)
        {
            let secs = self.idle.as_secs();
            self.remove(i, format!("expired: no stream and no action for {secs} s"));
        }
    }

    /// One unit of session `i`; `jobs_waiting`: job units were ready and waited for it.
    pub fn step(&mut self, i: usize, jobs_waiting: bool) {
        let t = Instant::now();
        let result = catch_unwind(AssertUnwindSafe(|| self.list[i].run.step()));
        let dt = t.elapsed().as_secs_f64();
        if jobs_waiting {
            self.share.add(t, dt, false);
        }
        let period = self.period;
        let l = &mut self.list[i];
        l.unit_seconds = if l.unit_seconds == 0.0 { dt } else { l.unit_seconds + 0.2 * (dt - l.unit_seconds) };
        l.units_done += 1;
        let outcome = match result {
            Ok(Ok(Some(chunk))) => {
                let due = l.start + period.mul_f64(l.info.chunks as f64);
                if Instant::now() > due + period {
                    l.info.late_chunks += 1;
                    self.metrics.session_late_chunks.inc();
                }
                l.info.chunks += 1;
                l.info.frames += chunk.video.num_frames as u64;
                l.info.last_action_id = chunk.action_id;
                l.units_done = 0;
                l.eager = false;
                self.metrics.session_chunks.inc();
                // Updated, never re-added: the front may have closed it already.
                if let Some(e) = self.shared.info.lock().unwrap().get_mut(&l.id) {
                    *e = l.info.clone();
                }
                match l.events.try_send(SessionEvent::Chunk(chunk)) {
                    Ok(()) => None,
                    // A slow viewer: this chunk is dropped, the session goes on.
                    Err(mpsc::error::TrySendError::Full(_)) => {
                        self.metrics.session_dropped_chunks.inc();
                        None
                    }
                    Err(mpsc::error::TrySendError::Closed(_)) => Some("the client went away".to_string()),
                }
            }
            Ok(Ok(None)) => None,
            Ok(Err(e)) => Some(format!("failed: {e:#}")),
            Err(_) => Some("failed: a session step panicked".to_string()),
        };
        if let Some(reason) = outcome {
            self.remove(i, reason);
        }
    }
}

#[cfg(test)]
mod live_tests {
    use super::*;

    struct Model;
    struct Run;

    impl SessionRun for Run {
        fn step(&mut self) -> anyhow::Result<Option<SessionChunk>> {
            Ok(None)
        }
        fn set_action(&mut self, _: &ActionPart) {}
        fn units_per_chunk(&self) -> u32 {
            5
        }
    }

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
        fn open(&self, _: &SessionRequest) -> Result<Box<dyn SessionRun>, RequestError> {
            Ok(Box::new(Run))
        }
    }

    #[test]
    fn frames_a_client_skipped_move_the_schedule_earlier_by_their_duration() {
        let metrics = Metrics::register(&mut prometheus_client::registry::Registry::default());
        let mut live =
            LiveSessions::new(Some(Arc::new(Model)), Duration::from_secs(60), 0.25, Default::default(), metrics);
        let (events, _rx) = mpsc::channel(8);
        let (reply, _) = oneshot::channel();
        let req = SessionRequest { prompt: None, start_seed: None, seed: 0, window: None };
        live.command(SessionCommand::Open { id: "s".into(), req, events, reply });
        let before = live.pace_inputs()[0].due;
        // 3 frames at 16 fps: 187.5 ms.
        live.command(SessionCommand::Skipped { id: "s".into(), frames: 3 });
        assert_eq!(before - live.pace_inputs()[0].due, Duration::from_micros(187_500));
        // Unknown sessions are ignored.
        live.command(SessionCommand::Skipped { id: "nope".into(), frames: 3 });
        assert_eq!(live.pace_inputs().len(), 1);
    }
}
