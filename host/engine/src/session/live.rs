//! The executor's side of sessions: the live list, their commands, one unit of a session, and
//! the pool gauges.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fastvideo_pipeline::session::{SessionModel, SessionRequest, SessionRun};
use fastvideo_request::ActionPart;
use tokio::sync::{mpsc, oneshot};

use super::info::{SessionEvent, SessionInfo};
use super::pacer::PaceInput;
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
        let live = Self {
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
        };
        live.publish_pool();
        live
    }

    /// The model's key/value pool occupancy in the gauges (after a chunk, and after a session
    /// returned its slabs).
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
        // Dropping `l.run` returns its key/value slabs; then the pool's gauges are read.
        drop(l);
        self.publish_pool();
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
                if let Some(st) = self.model.as_ref().and_then(|m| m.kv_stats()) {
                    self.metrics.kv_slabs_used.set(st.used_slabs as i64);
                    self.metrics.kv_evictions.set(st.evictions as i64);
                }
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
mod tests {
    use fastvideo_request::RequestError;

    use super::*;
    use fastvideo_pipeline::session::SessionChunk;

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
