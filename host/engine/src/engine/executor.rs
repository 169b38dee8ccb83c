//! The executor thread: it owns every tensor, takes commands from the front, asks the scheduler
//! which request's next unit runs (or lets a live session run its unit), advances it, and feeds
//! the measured time back into the cost model.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{mpsc as std_mpsc, Arc};
use std::time::Instant;

use fastvideo_pipeline::{Advance, PipelineRun, PipelineSpec, Value, Values, WaitForRoom, ADAPTERS};
use fastvideo_request::OmniEvent;
use tch::Device;

use super::batching;
use super::command::{Command, Job};
use super::config::EngineConfig;
use super::model::{Classifier, Residency};
use super::residents::Residents;
use super::shared::Shared;
use crate::scheduler::{Capacity, State, Unit};
use crate::session::{LiveSessions, SessionCommand};
use crate::{EngineError, Metrics};

/// One served model as the executor runs it.
pub(super) struct ExecModel {
    pub(super) id: String,
    pub(super) spec: Arc<PipelineSpec>,
    pub(super) classify: Classifier,
    pub(super) residency: Option<Arc<dyn Residency>>,
}

pub(super) struct Executor {
    /// Each model's pipeline and error classifier; a job's `model` indexes it (0: the primary).
    pipelines: Vec<ExecModel>,
    /// Which models' weights are on the device: one slot per pipeline, then the world model's
    /// when it can sleep. A job on a sleeping model carries the wake cost in its predicted
    /// remaining work, so the shortest-remaining order runs resident models' work first and a
    /// burst of requests for a cold model wakes it once instead of swapping request by request.
    residents: Residents,
    /// The world model's slot in `residents`, when it can sleep.
    world: Option<usize>,
    device: Device,
    shared: Arc<Shared>,
    metrics: Metrics,
    state: State,
    jobs: HashMap<u64, Job>,
    /// Jobs waiting for room (see [`WaitForRoom`]), back in the schedule when another ends.
    parked: Vec<(u64, Job)>,
    keys: HashMap<String, u64>,
    next_key: u64,
    max_batch: usize,
    max_batch_tokens: u64,
    sessions: LiveSessions,
}

impl Executor {
    pub(super) fn new(
        pipelines: Vec<ExecModel>,
        device: Device,
        shared: Arc<Shared>,
        metrics: Metrics,
        cfg: &EngineConfig,
        sessions: LiveSessions,
    ) -> Self {
        let mut slots: Vec<_> = pipelines.iter().map(|m| (m.id.clone(), m.residency.clone())).collect();
        let world = sessions.model().and_then(|w| Some((w.id().to_string(), Some(w.residency()?))));
        let world = world.map(|w| {
            slots.push(w);
            slots.len() - 1
        });
        Executor {
            residents: Residents::new(slots, cfg.max_resident_models, cfg.max_resident_bytes, metrics.clone()),
            world,
            pipelines,
            device,
            shared,
            metrics,
            state: State::new(
                cfg.policy,
                cfg.aging,
                Capacity { max_active: cfg.max_active.max(1), memory_bytes: cfg.memory_bytes },
            )
            .with_max_stretch(cfg.max_stretch, cfg.overdue_share)
            .with_sessions(sessions.fps(), sessions.frames_per_chunk(), cfg.job_floor),
            jobs: HashMap::new(),
            parked: Vec::new(),
            keys: HashMap::new(),
            next_key: 0,
            max_batch: cfg.max_batch.max(1),
            max_batch_tokens: cfg.max_batch_tokens,
            sessions,
        }
    }

    /// Runs the loop on its own thread until every sender of `rx` is gone.
    pub(super) fn spawn(self, rx: std_mpsc::Receiver<Command>) {
        std::thread::Builder::new()
            .name("fastvideo-executor".into())
            .spawn(move || self.run(rx))
            .expect("spawning the executor thread");
    }

    fn run(mut self, rx: std_mpsc::Receiver<Command>) {
        // Models beyond the bound sleep from the start (the primary is kept first).
        self.make_room(None, Some(0));
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
            self.sessions.expire(now, self.state.sessions());
            // The world model kept over the bound while sessions ran goes back once they end.
            if self.world.is_some() && self.sessions.is_empty() && self.residents.is_over() {
                self.make_room(None, None);
            }
            match self.state.next_unit(now) {
                Unit::Session { key, jobs_waiting } => {
                    if let Some(w) = self.world {
                        self.residents.touch(w);
                    }
                    self.sessions.step(key, jobs_waiting, self.state.sessions())
                }
                Unit::Job(k) => {
                    let t = Instant::now();
                    self.advance(k);
                    self.state.ran(t, t.elapsed().as_secs_f64());
                }
                Unit::Wait(until) => {
                    if let Ok(c) = rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
                        self.command(c);
                    }
                }
                Unit::Idle if self.state.is_empty() => {}
                // Cannot happen (a lone request always fits), but never spin or die: wait for news.
                Unit::Idle => match rx.recv() {
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
                self.state.add(
                    k,
                    priority,
                    job.predicted + self.residents.wake_cost(job.model),
                    job.memory,
                    job.submitted,
                );
                self.keys.insert(job.id.clone(), k);
                self.jobs.insert(k, *job);
            }
            Command::Cancel(id) => {
                if let Some(k) = self.keys.get(&id).copied() {
                    self.fail(k, EngineError::Cancelled);
                }
            }
            Command::CancelAll => {
                let all: Vec<u64> = self.jobs.keys().chain(self.parked.iter().map(|(k, _)| k)).copied().collect();
                for k in all {
                    self.fail(k, EngineError::Cancelled);
                }
            }
            Command::Session(SessionCommand::Open { request, adapters, events, reply }) => {
                // A session runs on the world model's weights: back on the device first.
                if let Some(w) = self.world {
                    if let Err(message) = self.bring_back(w) {
                        let _ = reply.send(Err(EngineError::Failed { code: "model_wake_failed".into(), message }));
                        return;
                    }
                }
                let open = SessionCommand::Open { request, adapters, events, reply };
                self.sessions.command(open, self.state.sessions())
            }
            Command::Session(c) => self.sessions.command(c, self.state.sessions()),
            Command::Residency { model, resident, done } => {
                let _ = done.send(if resident {
                    self.bring_back(model).map(|()| true)
                } else {
                    self.set_residency(model, false)
                });
            }
            Command::Swap(model, spec, done) => {
                // Runs hold their own Arc: started requests keep the old pipeline.
                self.pipelines[model].spec = spec;
                let _ = done.send(());
            }
        }
    }

    /// Ends a job without output; its state (tensors, plugin instances) is dropped here.
    fn fail(&mut self, k: u64, err: EngineError) {
        if let Some(i) = self.parked.iter().position(|(p, _)| *p == k) {
            let (_, job) = self.parked.swap_remove(i);
            self.jobs.insert(k, job);
        }
        let Some(mut job) = self.jobs.remove(&k) else { return };
        self.request_ended();
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

    /// One step of `k` and its partners as one batched call; each is charged its share of the
    /// time.
    fn advance_batch(&mut self, k: u64, partners: Vec<u64>) {
        let (spec, classify) = self.pipeline_of(k);
        super::adapters::sync(&spec, &self.jobs, k, &self.metrics);
        let keys: Vec<u64> = std::iter::once(k).chain(partners).collect();
        let mut jobs: Vec<Job> = keys.iter().map(|k| self.jobs.remove(k).expect("partners exist")).collect();
        let (results, seconds) = batching::step(&mut jobs, &keys, classify);
        let n = keys.len();
        let per_request = seconds / n as f64;
        self.metrics.step_batch_size.observe(n as f64);
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

    /// The pipeline and classifier of job `k`'s model.
    fn pipeline_of(&self, k: u64) -> (Arc<PipelineSpec>, Classifier) {
        let m = self.jobs.get(&k).map_or(0, |j| j.model);
        let p = &self.pipelines[m.min(self.pipelines.len() - 1)];
        (p.spec.clone(), p.classify)
    }

    /// Whether model slot `m` has started work (requests running on it; for the world model,
    /// live sessions): its state lives on its weights' device.
    fn busy(&self, m: usize) -> bool {
        if Some(m) == self.world {
            return !self.sessions.is_empty();
        }
        self.jobs.values().any(|j| j.model == m && j.run.is_some())
    }

    /// Sleeps (`false`) or wakes (`true`) model `m`'s weights (no room made); a model with
    /// started work does not sleep.
    fn set_residency(&mut self, m: usize, on: bool) -> Result<bool, String> {
        let busy = self.busy(m);
        let before = self.residents.is_resident(m);
        let after = self.residents.set(m, on, busy)?;
        if before != after {
            self.reprice(m);
        }
        Ok(after)
    }

    /// Model `m` back on the device, the least recently used idle models put to sleep first
    /// while the bound would be exceeded.
    fn bring_back(&mut self, m: usize) -> Result<(), String> {
        self.residents.touch(m);
        if self.residents.is_resident(m) {
            return Ok(());
        }
        self.make_room(Some(m), Some(m));
        self.set_residency(m, true).map(|_| ())
    }

    /// Sleeps idle models until the resident set (with `waking`) is within the bound.
    fn make_room(&mut self, waking: Option<usize>, keep: Option<usize>) {
        let busy: Vec<bool> = (0..self.residents.len()).map(|i| self.busy(i)).collect();
        for m in self.residents.make_room(waking, keep, |i| busy[i]) {
            self.reprice(m);
        }
    }

    /// Model `m` came or went: its jobs' predicted remaining work gains or loses the wake cost.
    fn reprice(&mut self, m: usize) {
        let extra = self.residents.wake_cost(m);
        let cost = self.shared.cost.lock().unwrap();
        for (k, job) in self.jobs.iter().filter(|(_, j)| j.model == m) {
            let left = cost.remaining_seconds(&job.key, job.steps_left, job.one_shot_spent);
            self.state.set_remaining(*k, left + extra);
        }
    }

    /// Before work on job `k`: its model's weights on the device.
    fn make_resident(&mut self, k: u64) -> Result<(), EngineError> {
        let m = self.jobs.get(&k).map_or(0, |j| j.model);
        self.bring_back(m).map_err(|message| EngineError::Failed { code: "model_wake_failed".into(), message })
    }

    fn advance(&mut self, k: u64) {
        if let Err(e) = self.make_resident(k) {
            return self.fail(k, e);
        }
        let partners = batching::partners(&self.jobs, k, self.max_batch, self.max_batch_tokens);
        if !partners.is_empty() {
            return self.advance_batch(k, partners);
        }
        let (spec, classify) = self.pipeline_of(k);
        super::adapters::sync(&spec, &self.jobs, k, &self.metrics);
        let job = self.jobs.get_mut(&k).expect("scheduled jobs exist");
        if job.run.is_none() {
            let req = job.req.take().expect("a queued job carries its request");
            self.metrics.queue_wait_seconds.observe(job.submitted.elapsed().as_secs_f64());
            let mut values = Values::default();
            if let Some(set) = &job.adapters {
                values.insert(ADAPTERS, Value::Adapters(Arc::clone(set)));
            }
            job.restart = Some(req.clone());
            job.run = Some(PipelineRun::new(spec, req, self.device, values, job.cancel.clone()));
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
            Ok(Err(e)) if e.downcast_ref::<WaitForRoom>().is_some() && !job.cancel.is_cancelled() => {
                // Momentarily full: wait (state dropped) until another request ends. With no
                // other request to end, waiting would be forever: fail it instead.
                if self.jobs.len() > 1 {
                    self.park(k);
                } else {
                    self.fail(k, EngineError::Failed { code: classify(&e).to_string(), message: format!("{e:#}") });
                }
            }
            Ok(Err(e)) => {
                let err = if job.cancel.is_cancelled() {
                    EngineError::Cancelled
                } else {
                    EngineError::Failed { code: classify(&e).to_string(), message: format!("{e:#}") }
                };
                self.fail(k, err);
            }
            Err(p) => {
                let message = format!("node `{node}` panicked: {}", fastvideo_torch::panic_message(p.as_ref()));
                self.fail(k, EngineError::Failed { code: "internal_error".into(), message });
            }
        }
    }

    /// Takes job `k` out of the schedule, its run dropped (and with it what it held), to start
    /// over once another request ends ([`WaitForRoom`]).
    fn park(&mut self, k: u64) {
        let Some(mut job) = self.jobs.remove(&k) else { return };
        self.state.remove(k);
        job.run = None;
        job.req = job.restart.take();
        tracing::debug!(id = %job.id, "waiting for room");
        self.parked.push((k, job));
    }

    /// A request ended: waiting jobs go back in the schedule (room may have come free), and
    /// models kept over the resident bound while busy go back to sleep.
    fn request_ended(&mut self) {
        self.unpark();
        self.make_room(None, None);
    }

    /// Puts every waiting job back in the schedule.
    fn unpark(&mut self) {
        for (k, job) in std::mem::take(&mut self.parked) {
            let priority = job.req.as_ref().map_or(0, |r| r.priority);
            self.state.add(k, priority, job.predicted + self.residents.wake_cost(job.model), job.memory, job.submitted);
            self.jobs.insert(k, job);
        }
    }

    fn finish(&mut self, k: u64) {
        let (_, classify) = self.pipeline_of(k);
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
        // Its run (and what it held) is gone: requests waiting for room may start.
        self.request_ended();
        let result = match out {
            Ok(Ok(out)) => {
                self.shared.cost.lock().unwrap().observe_one_shot(&job.key, job.one_shot_spent);
                self.metrics.count("completed");
                Ok(out)
            }
            Ok(Err(e)) => Err(EngineError::Failed { code: classify(&e).to_string(), message: format!("{e:#}") }),
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
