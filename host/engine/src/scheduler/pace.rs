//! Sessions in the scheduler: each live session's chunk deadlines ([`Deadlines`]) and the
//! pacing rule ([`Pacer`]) that decides, with the jobs' pick, whose unit runs next.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::share::Share;

/// The pacing rule. A session's chunk `n` is due at `start + n × period`; a session is urgent
/// when the units its chunk still needs, at the measured cost per unit, plus `margin` (the
/// longest job unit seen, which cannot be interrupted) would reach the deadline. Jobs that are
/// owed their floor share ([`crate::share::Share`]) run first; then urgent sessions (earliest deadline first),
/// then jobs, then sessions that are less than one period ahead of real time; otherwise the
/// executor waits for the next session to become urgent.
pub struct Pacer;

/// One live session as the pacing rule sees it.
#[derive(Debug, Clone, Copy)]
pub struct PaceInput {
    /// When its next chunk is due.
    pub due: Instant,
    /// Units that chunk still needs.
    pub units_left: u32,
    /// Measured seconds per unit (a moving average).
    pub unit_seconds: f64,
    /// A new action is waiting for this session's next chunk: run it now, whatever the deadline
    /// (at most one chunk early per action), so the action shows as soon as it can.
    pub eager: bool,
}

/// The rule's answer: whose unit runs next, or how long to wait.
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
    /// No job unit waits.
    None,
    /// Job units wait, and jobs had their floor share lately.
    Ready,
    /// Ready, and jobs had less than their floor share of the executor lately.
    Owed,
}

impl Pacer {
    /// The next unit among `sessions` and the jobs at `now`; `margin` is the longest job unit
    /// lately, `period` a chunk's playing time.
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

/// What the executor does next.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Unit {
    /// A unit of this job.
    Job(u64),
    /// A unit of this session.
    Session {
        /// The session's slot.
        key: u64,
        /// A job unit was ready and waits for it (the time counts against the jobs' floor).
        jobs_waiting: bool,
    },
    /// Nothing to do before this instant (sessions ahead of their schedule).
    Wait(Instant),
    /// Nothing to do.
    Idle,
}

/// One session's pacing: chunk `n` is due at `start + n × period`.
#[derive(Debug, Clone)]
struct Session {
    start: Instant,
    chunks: u64,
    units_per_chunk: u32,
    units_done: u32,
    /// Seconds per unit lately (moving average).
    unit_seconds: f64,
    eager: bool,
}

/// Every live session's deadlines, and what the rule needs besides: the longest job unit lately
/// (a session must allow for one it cannot interrupt), and the share of contested time jobs
/// have had against their floor.
#[derive(Debug)]
pub struct Deadlines {
    sessions: BTreeMap<u64, Session>,
    period: Duration,
    frames_per_chunk: u32,
    margin: f64,
    share: Share,
    job_floor: f64,
}

impl Deadlines {
    /// Sessions whose chunks of `frames_per_chunk` frames play at `fps`; jobs keep at least
    /// `job_floor` of the executor while both wait.
    pub fn new(fps: u32, frames_per_chunk: u32, job_floor: f64) -> Self {
        let frames_per_chunk = frames_per_chunk.max(1);
        Self {
            sessions: BTreeMap::new(),
            period: Duration::from_secs_f64(frames_per_chunk as f64 / fps.max(1) as f64),
            frames_per_chunk,
            margin: 0.0,
            share: Share::new(Instant::now()),
            job_floor,
        }
    }

    /// Whether no session is live, so jobs have the executor to themselves.
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// A chunk's playing time.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// A session opened now, whose chunks take `units_per_chunk` units.
    pub fn open(&mut self, key: u64, units_per_chunk: u32, now: Instant) {
        let s = Session {
            start: now,
            chunks: 0,
            units_per_chunk: units_per_chunk.max(1),
            units_done: 0,
            unit_seconds: 0.0,
            eager: false,
        };
        self.sessions.insert(key, s);
    }

    /// The session closed: its deadlines no longer count.
    pub fn close(&mut self, key: u64) {
        self.sessions.remove(&key);
    }

    /// An action arrived: the session's next chunk runs as soon as it can.
    pub fn action(&mut self, key: u64) {
        if let Some(s) = self.sessions.get_mut(&key) {
            s.eager = true;
        }
    }

    /// A unit of session `key` started at `start` and took `seconds`; `jobs_waiting`: job units
    /// were ready and waited for it (only then is it contested time).
    pub fn ran(&mut self, key: u64, start: Instant, seconds: f64, jobs_waiting: bool) {
        if jobs_waiting {
            self.share.add(start, seconds, false);
        }
        if let Some(s) = self.sessions.get_mut(&key) {
            s.unit_seconds =
                if s.unit_seconds == 0.0 { seconds } else { s.unit_seconds + 0.2 * (seconds - s.unit_seconds) };
            s.units_done += 1;
        }
    }

    /// Session `key` finished a chunk at `now`; returns whether it was late (more than a
    /// period after its deadline).
    pub fn chunk_done(&mut self, key: u64, now: Instant) -> bool {
        let period = self.period;
        let Some(s) = self.sessions.get_mut(&key) else { return false };
        let due = s.start + period.mul_f64(s.chunks as f64);
        s.chunks += 1;
        s.units_done = 0;
        s.eager = false;
        now > due + period
    }

    /// Frames made but never shown leave a hole in what the client plays: the schedule moves
    /// that much earlier, so the next chunks come sooner and fill it (else every skip is a
    /// stall of that length on screen).
    pub fn skipped(&mut self, key: u64, frames: u64) {
        let shift = self.period.mul_f64(frames as f64 / self.frames_per_chunk as f64);
        if let Some(s) = self.sessions.get_mut(&key) {
            s.start = s.start.checked_sub(shift).unwrap_or(s.start);
        }
    }

    /// A job unit started at `start` and took `seconds`: the margin (the max, decaying 5 % a
    /// unit) and the share.
    pub fn job_ran(&mut self, start: Instant, seconds: f64) {
        self.margin = (self.margin * 0.95).max(seconds);
        self.share.add(start, seconds, true);
    }

    /// The session whose unit runs next, the job (`job`: the one ready, if any), or how long
    /// to wait.
    pub fn pick(&self, now: Instant, job: Option<u64>) -> Unit {
        let jobs = match job {
            Some(_) if self.share.favoured_fraction() < self.job_floor => Jobs::Owed,
            Some(_) => Jobs::Ready,
            None => Jobs::None,
        };
        let (keys, inputs): (Vec<u64>, Vec<PaceInput>) = self
            .sessions
            .iter()
            .map(|(k, s)| {
                let input = PaceInput {
                    due: s.start + self.period.mul_f64(s.chunks as f64),
                    units_left: s.units_per_chunk.saturating_sub(s.units_done),
                    unit_seconds: s.unit_seconds,
                    eager: s.eager,
                };
                (*k, input)
            })
            .unzip();
        match (Pacer::pick(now, &inputs, jobs, self.margin, self.period), job) {
            (Pick::Session(i), job) => Unit::Session { key: keys[i], jobs_waiting: job.is_some() },
            (Pick::Job, Some(k)) => Unit::Job(k),
            (Pick::Wait(t), _) => Unit::Wait(t),
            // The rule picks a job only when one is ready.
            (Pick::Job, None) | (Pick::Idle, _) => Unit::Idle,
        }
    }

    #[cfg(test)]
    fn due(&self, key: u64) -> Instant {
        let s = &self.sessions[&key];
        s.start + self.period.mul_f64(s.chunks as f64)
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
    fn frames_a_client_skipped_move_the_schedule_earlier_by_their_duration() {
        let now = Instant::now();
        let mut d = Deadlines::new(16, 4, 0.25);
        d.open(7, 5, now);
        let before = d.due(7);
        // 3 frames at 16 fps: 187.5 ms.
        d.skipped(7, 3);
        assert_eq!(before - d.due(7), Duration::from_micros(187_500));
        // Unknown sessions are ignored.
        d.skipped(8, 3);
        // A chunk finished a period after its deadline is late; the next is due a period later.
        let due = d.due(7);
        assert!(!d.chunk_done(7, due));
        assert!(d.chunk_done(7, d.due(7) + Duration::from_millis(300)));
    }

    #[test]
    fn jobs_owed_their_floor_go_before_urgent_sessions() {
        let now = Instant::now();
        let late = [s(now, 0, 5), s(now, 10, 5)];
        assert_eq!(Pacer::pick(now, &late, Jobs::Ready, 0.1, P), Pick::Session(0));
        assert_eq!(Pacer::pick(now, &late, Jobs::Owed, 0.1, P), Pick::Job);
    }
}
