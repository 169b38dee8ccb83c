//! The pacing rule: which of the sessions and jobs gets the executor's next unit.

use std::time::{Duration, Instant};

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
