//! Executor time lately of one class of work against the rest (jobs against world sessions;
//! overdue jobs against the others), each side decaying with a half-life of
//! [`Share::HALF_LIFE`]. Callers count only contested time — units run while the favoured class
//! was waiting — so a class arriving after a stretch of the other alone is not owed anything:
//! a floor only bites while one class keeps the executor from the other.

use std::time::{Duration, Instant};

/// Decaying executor seconds of the favoured class and of the rest, to tell whether the favoured
/// class had its floor lately.
#[derive(Debug, Clone, Copy)]
pub struct Share {
    favoured: f64,
    others: f64,
    at: Instant,
}

impl Share {
    /// How fast old time stops counting: long enough to smooth over single units, short enough
    /// that a class is not owed for a stretch long past.
    pub const HALF_LIFE: Duration = Duration::from_secs(2);

    /// Nothing counted, as of `now`.
    pub fn new(now: Instant) -> Self {
        Self { favoured: 0.0, others: 0.0, at: now }
    }

    fn decay(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        let k = 0.5f64.powf(dt / Self::HALF_LIFE.as_secs_f64());
        (self.favoured, self.others, self.at) = (self.favoured * k, self.others * k, now.max(self.at));
    }

    /// A unit that started at `start` and took `seconds`, of the favoured class or not.
    pub fn add(&mut self, start: Instant, seconds: f64, favoured: bool) {
        self.decay(start);
        if favoured {
            self.favoured += seconds;
        } else {
            self.others += seconds;
        }
    }

    /// Nothing counted yet.
    pub fn is_empty(&self) -> bool {
        self.favoured + self.others <= 0.0
    }

    /// The favoured class's share of the counted time lately (1 when nothing was counted).
    pub fn favoured_fraction(&self) -> f64 {
        let total = self.favoured + self.others;
        if total <= 0.0 {
            1.0
        } else {
            self.favoured / total
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_share_decays_with_its_half_life_and_counts_both_sides() {
        let t0 = Instant::now();
        let mut share = Share::new(t0);
        assert_eq!(share.favoured_fraction(), 1.0);
        share.add(t0, 3.0, false);
        share.add(t0, 1.0, true);
        assert!((share.favoured_fraction() - 0.25).abs() < 1e-12);
        // Two half-lives later the 4 s so far weigh 1 s; one more second of the favoured class.
        share.add(t0 + Share::HALF_LIFE * 2, 1.0, true);
        let want = (1.0 / 4.0 + 1.0) / (4.0 / 4.0 + 1.0);
        assert!((share.favoured_fraction() - want).abs() < 1e-9, "{}", share.favoured_fraction());
    }
}
