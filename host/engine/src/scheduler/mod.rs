//! Which request's next unit of work runs: a plain state machine with no GPU, no threads and no
//! clock of its own (callers pass `now`), so every policy decision is unit-tested.
//!
//! Units are what [`fastvideo_pipeline::PipelineRun::advance`] does: one denoise step, or one
//! whole one-shot stage (text encode, VAE decode). Between two units the executor may switch to
//! another request; that is what keeps a 4-step job from queueing behind a 50-step one.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::share::Share;

mod pace;

pub use pace::{Deadlines, Jobs, PaceInput, Pacer, Pick, Unit};

/// How the next unit is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// Higher `priority` first; then the least predicted remaining work, reduced by
    /// `aging` for every second a request has waited (so a stream of short jobs cannot starve a
    /// long one forever); then arrival order.
    #[default]
    ShortestRemaining,
    /// Request-level first come, first served: the oldest request runs to completion before the
    /// next starts. The baseline the benchmark compares against (what a server without step
    /// boundaries does).
    Fifo,
}

impl std::str::FromStr for Policy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "shortest_remaining" | "shortest-remaining" => Ok(Policy::ShortestRemaining),
            "fifo" => Ok(Policy::Fifo),
            other => Err(format!("`{other}` is not shortest_remaining or fifo")),
        }
    }
}

/// One request as the scheduler sees it.
#[derive(Debug, Clone)]
struct Entry {
    priority: i32,
    arrival: u64,
    submitted: Instant,
    /// Predicted seconds of work left.
    remaining: f64,
    /// Predicted seconds of the whole request, at admission (its solo time).
    total: f64,
    /// Predicted peak memory while active, in bytes.
    memory: u64,
    /// Holds state (latents, plugin instances) — counted against the active limits.
    active: bool,
}

/// Limits on how many requests hold state at once.
#[derive(Debug, Clone, Copy)]
pub struct Capacity {
    /// Requests holding state at once.
    pub max_active: usize,
    /// Sum of the active requests' predicted memory.
    pub memory_bytes: u64,
}

/// The scheduler's whole state. Keys are the engine's request slots.
#[derive(Debug)]
pub struct State {
    policy: Policy,
    /// Seconds of predicted work forgiven per second waited.
    aging: f64,
    capacity: Capacity,
    entries: BTreeMap<u64, Entry>,
    next_arrival: u64,
    /// A request in the system longer than this many times its predicted solo time is overdue
    /// (`f64::INFINITY`: never). While overdue requests and others both wait, the overdue ones
    /// (oldest first) get `overdue_share` of the executor's recent time and the others the
    /// rest, in shortest-remaining order. So an overdue request finishes within about
    /// `1 / overdue_share` of its solo time more, whatever keeps arriving — aging alone does not
    /// bound that: it forgives a fixed rate of seconds, too little for a long job — while the
    /// short requests keep most of their gain: they still get the rest of the executor, rather
    /// than waiting behind whole long runs.
    max_stretch: f64,
    overdue_share: f64,
    share: Share,
    /// The last pick: was it overdue, and were both classes waiting (only then is time counted).
    last: Option<(bool, bool)>,
    /// Live sessions' chunk deadlines: the pacing policy between them and the jobs.
    deadlines: Deadlines,
}

/// The stretch bound's floor: a request is never overdue before this long in the system (tiny
/// requests would otherwise be overdue after milliseconds and make the order plain FIFO).
const MIN_OVERDUE_SECONDS: f64 = 0.5;

impl State {
    /// An empty scheduler: no requests, no sessions, the overdue bound off.
    pub fn new(policy: Policy, aging: f64, capacity: Capacity) -> Self {
        Self {
            policy,
            aging,
            capacity,
            entries: BTreeMap::new(),
            next_arrival: 0,
            max_stretch: f64::INFINITY,
            overdue_share: 0.5,
            share: Share::new(Instant::now()),
            last: None,
            deadlines: Deadlines::new(16, 4, 0.25),
        }
    }

    /// Paces sessions whose chunks of `frames_per_chunk` frames play at `fps`, with jobs keeping
    /// at least `job_floor` of the contested executor time ([`Pacer`]).
    pub fn with_sessions(mut self, fps: u32, frames_per_chunk: u32, job_floor: f64) -> Self {
        self.deadlines = Deadlines::new(fps, frames_per_chunk, job_floor);
        self
    }

    /// The sessions' deadlines (opened, acted on, run and closed by the executor).
    pub fn sessions(&mut self) -> &mut Deadlines {
        &mut self.deadlines
    }

    /// The next unit: the pick among jobs ([`pick`](Self::pick)), then the pacing rule between it
    /// and the sessions' deadlines.
    pub fn next_unit(&mut self, now: Instant) -> Unit {
        let job = self.pick(now);
        if self.deadlines.is_empty() {
            return job.map_or(Unit::Idle, Unit::Job);
        }
        self.deadlines.pick(now, job)
    }

    /// See [`State::max_stretch`](State#structfield.max_stretch): requests in the system longer
    /// than `stretch` × their solo time get `share` (0 to 1) of the contested executor time.
    pub fn with_max_stretch(mut self, stretch: f64, share: f64) -> Self {
        self.max_stretch = stretch;
        self.overdue_share = share.clamp(0.0, 1.0);
        self
    }

    /// The job unit picked last started at `start` and took `seconds` (for the overdue share,
    /// and the margin sessions keep for a job unit).
    pub fn ran(&mut self, start: Instant, seconds: f64) {
        self.deadlines.job_ran(start, seconds);
        if let Some((overdue, true)) = self.last {
            self.share.add(start, seconds, overdue);
        }
    }

    /// How it picks the next job unit.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// A new request, queued (not yet holding state).
    pub fn add(&mut self, key: u64, priority: i32, remaining: f64, memory: u64, now: Instant) {
        let arrival = self.next_arrival;
        self.next_arrival += 1;
        let total = remaining;
        self.entries.insert(key, Entry { priority, arrival, submitted: now, remaining, total, memory, active: false });
    }

    /// The request finished, failed or was cancelled.
    pub fn remove(&mut self, key: u64) {
        self.entries.remove(&key);
    }

    /// New prediction of the work left (after a unit ran).
    pub fn set_remaining(&mut self, key: u64, remaining: f64) {
        if let Some(e) = self.entries.get_mut(&key) {
            e.remaining = remaining.max(0.0);
        }
    }

    /// Requests it holds, queued or active.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it holds no request.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Requests holding state.
    pub fn active(&self) -> usize {
        self.entries.values().filter(|e| e.active).count()
    }

    /// Requests waiting for their first unit.
    pub fn queued(&self) -> usize {
        self.entries.len() - self.active()
    }

    /// Predicted seconds of all work not yet done.
    pub fn backlog_seconds(&self) -> f64 {
        self.entries.values().map(|e| e.remaining).sum()
    }

    fn active_memory(&self) -> u64 {
        self.entries.values().filter(|e| e.active).map(|e| e.memory).sum()
    }

    /// The request whose next unit runs now, marking it active. `None` when nothing is runnable
    /// (empty, or only queued requests that do not fit beside the active ones).
    pub fn pick(&mut self, now: Instant) -> Option<u64> {
        let active = self.active();
        let memory = self.active_memory();
        let fits = |e: &Entry| {
            e.active
                || (active < self.capacity.max_active
                    && (active == 0 || memory + e.memory <= self.capacity.memory_bytes))
        };
        let key = match self.policy {
            Policy::Fifo => {
                // The oldest request runs until it is done; nothing overtakes it.
                self.entries.iter().min_by_key(|(_, e)| e.arrival).map(|(k, _)| *k)
            }
            Policy::ShortestRemaining => {
                let in_system = |e: &Entry| now.saturating_duration_since(e.submitted).as_secs_f64();
                let score = |e: &Entry| e.remaining - self.aging * in_system(e);
                // Overtaken: a request that arrived later needs less work than this one has left.
                // Only such a request can be starved by shortest-first; one waiting behind older
                // work of its own size (every short job, when the server is over capacity) is
                // not, and calling it overdue would only turn the order into FIFO.
                let past_stretch = |e: &Entry| in_system(e) > (self.max_stretch * e.total).max(MIN_OVERDUE_SECONDS);
                // Per unit: the sort below runs only once some request is past its stretch.
                let mut overtaken = std::collections::HashSet::new();
                if self.max_stretch.is_finite() && self.entries.values().any(past_stretch) {
                    let mut by_age: Vec<(u64, u64, f64)> =
                        self.entries.iter().map(|(k, e)| (e.arrival, *k, e.remaining)).collect();
                    by_age.sort_by_key(|a| std::cmp::Reverse(a.0));
                    let mut least_younger = f64::INFINITY;
                    for (_, k, remaining) in by_age {
                        if remaining > least_younger {
                            overtaken.insert(k);
                        }
                        least_younger = least_younger.min(remaining);
                    }
                }
                let overdue = |k: &u64, e: &Entry| overtaken.contains(k) && past_stretch(e);
                let runnable = || self.entries.iter().filter(|(_, e)| fits(e));
                // Overdue: priority, then oldest first — so once overdue, only older overdue
                // requests go before it within the share, which is what makes the bound hold
                // when short requests turn overdue too (under load). The others: priority, then
                // least work left.
                let late = runnable()
                    .filter(|(k, e)| overdue(k, e))
                    .min_by(|(_, a), (_, b)| b.priority.cmp(&a.priority).then(a.arrival.cmp(&b.arrival)));
                let rest = runnable().filter(|(k, e)| !overdue(k, e)).min_by(|(_, a), (_, b)| {
                    b.priority.cmp(&a.priority).then(score(a).total_cmp(&score(b))).then(a.arrival.cmp(&b.arrival))
                });
                let (key, late_pick, contested) = match (late, rest) {
                    (Some((k, _)), None) => (*k, true, false),
                    (None, Some((k, _))) => (*k, false, false),
                    (None, None) => return None,
                    (Some((lk, l)), Some((rk, r))) => match l.priority.cmp(&r.priority) {
                        std::cmp::Ordering::Greater => (*lk, true, false),
                        std::cmp::Ordering::Less => (*rk, false, false),
                        // The share is a floor: an overdue request that shortest-first would pick
                        // anyway runs (and that time is not counted against it); otherwise the
                        // share decides (nothing counted yet: the overdue one goes first).
                        std::cmp::Ordering::Equal if score(l) <= score(r) => (*lk, true, false),
                        std::cmp::Ordering::Equal => {
                            if self.share.is_empty() || self.share.favoured_fraction() < self.overdue_share {
                                (*lk, true, true)
                            } else {
                                (*rk, false, true)
                            }
                        }
                    },
                };
                self.last = Some((late_pick, contested));
                Some(key)
            }
        }?;
        self.entries.get_mut(&key)?.active = true;
        Some(key)
    }

    /// How long the oldest queued request has waited (for metrics).
    pub fn oldest_wait(&self, now: Instant) -> Duration {
        self.entries
            .values()
            .filter(|e| !e.active)
            .map(|e| now.saturating_duration_since(e.submitted))
            .max()
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOMY: Capacity = Capacity { max_active: 64, memory_bytes: u64::MAX };

    /// Runs the scheduler to completion with each unit costing `unit` seconds of predicted work,
    /// and returns the order in which requests finished.
    fn simulate(state: &mut State, mut work: BTreeMap<u64, u32>, unit: f64) -> Vec<u64> {
        let now = Instant::now();
        let mut done = Vec::new();
        while let Some(k) = state.pick(now) {
            let left = work.get_mut(&k).unwrap();
            *left -= 1;
            if *left == 0 {
                state.remove(k);
                done.push(k);
            } else {
                state.set_remaining(k, *left as f64 * unit);
            }
        }
        done
    }

    #[test]
    fn short_job_submitted_behind_long_one_finishes_first() {
        let now = Instant::now();
        let mut s = State::new(Policy::ShortestRemaining, 0.0, ROOMY);
        s.add(1, 0, 50.0, 1, now);
        // The long job has started.
        assert_eq!(s.pick(now), Some(1));
        s.set_remaining(1, 49.0);
        s.add(2, 0, 4.0, 1, now);
        let order = simulate(&mut s, BTreeMap::from([(1, 49), (2, 4)]), 1.0);
        assert_eq!(order, vec![2, 1]);
    }

    #[test]
    fn fifo_runs_requests_to_completion_in_arrival_order() {
        let now = Instant::now();
        let mut s = State::new(Policy::Fifo, 0.0, ROOMY);
        s.add(1, 0, 50.0, 1, now);
        s.add(2, 5, 4.0, 1, now);
        assert_eq!(s.pick(now), Some(1));
        let order = simulate(&mut s, BTreeMap::from([(1, 49), (2, 4)]), 1.0);
        assert_eq!(order, vec![1, 2]);
    }

    #[test]
    fn priority_wins_over_remaining_work() {
        let now = Instant::now();
        let mut s = State::new(Policy::ShortestRemaining, 0.0, ROOMY);
        s.add(1, 0, 1.0, 1, now);
        s.add(2, 1, 100.0, 1, now);
        assert_eq!(s.pick(now), Some(2));
    }

    #[test]
    fn equal_work_runs_in_arrival_order() {
        let now = Instant::now();
        let mut s = State::new(Policy::ShortestRemaining, 0.0, ROOMY);
        for k in [7, 3, 5] {
            s.add(k, 0, 10.0, 1, now);
        }
        assert_eq!(s.pick(now), Some(7));
    }

    #[test]
    fn aging_lets_a_long_waiting_job_overtake_fresh_short_ones() {
        let t0 = Instant::now();
        let mut s = State::new(Policy::ShortestRemaining, 0.5, ROOMY);
        s.add(1, 0, 30.0, 1, t0);
        // 100 s later a 5 s job arrives: the old one's score is 30 - 50 < 5.
        let later = t0 + Duration::from_secs(100);
        s.add(2, 0, 5.0, 1, later);
        assert_eq!(s.pick(later), Some(1));
        // Without aging the short job would go first.
        let mut s = State::new(Policy::ShortestRemaining, 0.0, ROOMY);
        s.add(1, 0, 30.0, 1, t0);
        s.add(2, 0, 5.0, 1, later);
        assert_eq!(s.pick(later), Some(2));
    }

    #[test]
    fn overdue_requests_get_their_share_of_the_executor_oldest_first() {
        let t0 = Instant::now();
        let mut s = State::new(Policy::ShortestRemaining, 0.0, ROOMY).with_max_stretch(4.0, 0.5);
        s.add(1, 0, 2.0, 1, t0); // solo 2 s: overdue after 8 s in the system
        let t = t0 + Duration::from_secs(7);
        s.add(2, 0, 0.1, 1, t);
        assert_eq!(s.pick(t), Some(2), "not overdue yet: shortest first");
        s.ran(t, 0.1);
        s.remove(2);
        // Overdue now: it and a stream of fresh short requests (one 0.3-s unit each, a new one
        // arriving as each ends) take turns by time, half each.
        let mut t = t0 + Duration::from_secs(9);
        let mut next = 3;
        s.add(next, 0, 0.3, 1, t);
        let (mut late, mut rest) = (0.0, 0.0);
        for _ in 0..40 {
            let k = s.pick(t).unwrap();
            let dt = if k == 1 { 0.1 } else { 0.3 };
            s.ran(t, dt);
            t += Duration::from_secs_f64(dt);
            if k == 1 {
                late += dt;
            } else {
                rest += dt;
                s.remove(k);
                next += 1;
                s.add(next, 0, 0.3, 1, t);
            }
        }
        assert!((late / (late + rest) - 0.5).abs() < 0.1, "overdue {late:.1} s, others {rest:.1} s");
        // Several overdue: the oldest first. Only an overtaken request (a later one needs less
        // work) can be overdue: the youngest here is not, however long it waited.
        let mut o = State::new(Policy::ShortestRemaining, 0.0, ROOMY).with_max_stretch(4.0, 0.5);
        o.add(1, 0, 0.3, 1, t0);
        o.add(2, 0, 0.2, 1, t0 + Duration::from_secs(1));
        o.add(3, 0, 0.1, 1, t0 + Duration::from_secs(2));
        assert_eq!(o.pick(t0 + Duration::from_secs(20)), Some(1), "1 and 2 overdue: the older first");
        let mut o = State::new(Policy::ShortestRemaining, 0.0, ROOMY).with_max_stretch(4.0, 0.5);
        for k in 1..=3 {
            o.add(k, 0, 0.3, 1, t0 + Duration::from_secs(k));
        }
        o.set_remaining(1, 0.1);
        assert_eq!(o.pick(t0 + Duration::from_secs(60)), Some(1), "equals in line: least work left, not FIFO");
        assert!(o.last == Some((false, false)), "nobody overtaken, nobody overdue");
        // Priority still comes first.
        o.add(5, 1, 50.0, 1, t0 + Duration::from_secs(20));
        assert_eq!(o.pick(t0 + Duration::from_secs(20)), Some(5));
        // A floor, not a cap: an overdue request shortest-first prefers anyway always runs.
        let mut f = State::new(Policy::ShortestRemaining, 0.0, ROOMY).with_max_stretch(4.0, 0.5);
        f.add(1, 0, 2.0, 1, t0);
        f.add(2, 0, 0.3, 1, t0 + Duration::from_secs(1));
        f.set_remaining(1, 0.05);
        let t = t0 + Duration::from_secs(30);
        for _ in 0..5 {
            assert_eq!(f.pick(t), Some(1));
            f.ran(t, 0.01);
        }
        // Off: the long request waits for every short one.
        let mut s = State::new(Policy::ShortestRemaining, 0.0, ROOMY);
        s.add(1, 0, 2.0, 1, t0);
        s.add(2, 0, 0.1, 1, t0 + Duration::from_secs(100));
        assert_eq!(s.pick(t0 + Duration::from_secs(100)), Some(2));
    }

    #[test]
    fn under_a_stream_of_short_jobs_the_stretch_bound_finishes_a_long_one_in_time() {
        // A 1-unit job at 9 of every 10 ticks (load 0.9 from them) beside one 10-unit job: how
        // many ticks the long job takes.
        let finish = |stretch: f64| {
            let t0 = Instant::now();
            let mut s = State::new(Policy::ShortestRemaining, 0.0, ROOMY).with_max_stretch(stretch, 0.5);
            s.add(0, 0, 10.0, 1, t0);
            let mut left = BTreeMap::from([(0u64, 10u32)]);
            for tick in 0..400u64 {
                let now = t0 + Duration::from_secs(tick);
                if tick % 10 != 9 {
                    s.add(tick + 1, 0, 1.0, 1, now);
                    left.insert(tick + 1, 1);
                }
                let k = s.pick(now).unwrap();
                s.ran(now, 1.0);
                let l = left.get_mut(&k).unwrap();
                *l -= 1;
                if *l == 0 {
                    s.remove(k);
                    left.remove(&k);
                    if k == 0 {
                        return tick + 1;
                    }
                } else {
                    s.set_remaining(k, *l as f64);
                }
            }
            u64::MAX
        };
        let (off, on) = (finish(f64::INFINITY), finish(3.0));
        eprintln!("the long job took {off} ticks without the bound, {on} with max stretch 3, share 0.5");
        assert!(off >= 90, "shortest-remaining alone gives it only the idle ticks: {off}");
        // Overdue after 3 x 10 ticks, then at least half of the executor: done by (3 + 2) x 10.
        assert!(on <= 50, "{on} ticks");
    }

    #[test]
    fn active_limit_keeps_queued_requests_waiting() {
        let now = Instant::now();
        let mut s = State::new(Policy::ShortestRemaining, 0.0, Capacity { max_active: 1, memory_bytes: u64::MAX });
        s.add(1, 0, 10.0, 1, now);
        assert_eq!(s.pick(now), Some(1));
        s.add(2, 0, 1.0, 1, now);
        // Shorter, but no slot is free: the active request continues.
        assert_eq!(s.pick(now), Some(1));
        assert_eq!((s.active(), s.queued()), (1, 1));
        s.remove(1);
        assert_eq!(s.pick(now), Some(2));
    }

    #[test]
    fn memory_budget_limits_what_runs_beside_active_requests() {
        let now = Instant::now();
        let mut s = State::new(Policy::ShortestRemaining, 0.0, Capacity { max_active: 8, memory_bytes: 100 });
        s.add(1, 0, 10.0, 60, now);
        assert_eq!(s.pick(now), Some(1));
        s.add(2, 0, 1.0, 60, now); // 60 + 60 > 100
        s.add(3, 0, 2.0, 30, now); // fits
        assert_eq!(s.pick(now), Some(3));
        assert_eq!(s.pick(now), Some(3));
        s.remove(3);
        assert_eq!(s.pick(now), Some(1));
        s.remove(1);
        // Alone, a request always runs (admission already refused what can never fit).
        assert_eq!(s.pick(now), Some(2));
    }

    #[test]
    fn backlog_sums_remaining_work() {
        let now = Instant::now();
        let mut s = State::new(Policy::ShortestRemaining, 0.0, ROOMY);
        s.add(1, 0, 2.5, 1, now);
        s.add(2, 0, 1.5, 1, now);
        s.set_remaining(2, 0.5);
        assert!((s.backlog_seconds() - 3.0).abs() < 1e-9);
        assert!(s.pick(now).is_some());
        assert_eq!(s.queued(), 1);
    }

    #[test]
    fn policy_parses_from_config_words() {
        assert_eq!("fifo".parse::<Policy>(), Ok(Policy::Fifo));
        assert_eq!("shortest_remaining".parse::<Policy>(), Ok(Policy::ShortestRemaining));
        assert!("lifo".parse::<Policy>().unwrap_err().contains("lifo"));
    }
}
