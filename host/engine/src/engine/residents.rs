//! Which served models' weights are on the device: the bound on how many may be (a count, a
//! byte budget, or both), least-recently-used eviction under it, and what bringing a sleeping
//! model back costs (measured, for the scheduler's cost model).
//!
//! One slot per served video model (the primary first) and, when the world model can sleep,
//! one for it last. A slot without a [`Residency`] never leaves the device; its weights count in
//! the count bound, and the byte budget here is what is left beside them (the assembly
//! subtracts them and refuses to start when a sleepable model could never fit).

use std::sync::Arc;
use std::time::Instant;

use fastvideo_pipeline::Residency;

use crate::metrics::{Metrics, ModelLabel};

/// The wake cost assumed for a model that has not woken yet: a transformer of a few GB over
/// PCIe, so that resident work goes first until a wake is measured.
const FIRST_WAKE_GUESS: f64 = 0.1;

struct Slot {
    id: String,
    residency: Option<Arc<dyn Residency>>,
    resident: bool,
    last_used: Instant,
    /// Seconds bringing its weights back takes (an average weighing the latest wake half; none
    /// before the first).
    wake_seconds: Option<f64>,
    /// Never on the device yet (loaded lazily): its first wake reads the checkpoint, which says
    /// nothing about later wakes, so it is not measured.
    never_woken: bool,
}

pub(super) struct Residents {
    slots: Vec<Slot>,
    max_count: Option<usize>,
    /// Bytes the sleepable models' weights may hold on the device at once.
    max_bytes: Option<u64>,
    metrics: Metrics,
}

impl Residents {
    pub(super) fn new(
        slots: Vec<(String, Option<Arc<dyn Residency>>)>,
        max_count: Option<usize>,
        max_bytes: Option<u64>,
        metrics: Metrics,
    ) -> Self {
        let now = Instant::now();
        let slots: Vec<Slot> = slots
            .into_iter()
            .map(|(id, residency)| {
                let resident = residency.as_ref().is_none_or(|r| r.is_resident());
                metrics.set_resident(&id, resident);
                Slot { id, residency, resident, last_used: now, wake_seconds: None, never_woken: !resident }
            })
            .collect();
        let r = Self { slots, max_count: max_count.map(|m| m.max(1)), max_bytes, metrics };
        r.publish_bytes();
        r
    }

    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }

    pub(super) fn is_resident(&self, m: usize) -> bool {
        self.slots.get(m).is_none_or(|s| s.resident)
    }

    /// Work is about to run on `m` (the least recently used idle model sleeps first).
    pub(super) fn touch(&mut self, m: usize) {
        if let Some(s) = self.slots.get_mut(m) {
            s.last_used = Instant::now();
        }
    }

    /// What running work on model `m` first costs: nothing while it is resident, else bringing
    /// it back (measured; [`FIRST_WAKE_GUESS`] before its first wake).
    pub(super) fn wake_cost(&self, m: usize) -> f64 {
        match self.slots.get(m) {
            Some(s) if !s.resident => s.wake_seconds.unwrap_or(FIRST_WAKE_GUESS),
            _ => 0.0,
        }
    }

    /// Sleeps (`false`) or wakes (`true`) model `m`'s weights; `busy`: it has started work, so
    /// it does not sleep. Answers whether it is resident after.
    pub(super) fn set(&mut self, m: usize, on: bool, busy: bool) -> Result<bool, String> {
        let s = self.slots.get_mut(m).ok_or("no such model")?;
        let Some(r) = s.residency.clone() else {
            return if on { Ok(true) } else { Err(format!("`{}` cannot sleep (its weights stay resident)", s.id)) };
        };
        if s.resident == on {
            return Ok(on);
        }
        if !on && busy {
            return Err(format!("`{}` has requests running; it sleeps once they end", s.id));
        }
        let t = Instant::now();
        if on { r.wake() } else { r.sleep() }.map_err(|e| format!("{e:#}"))?;
        let seconds = t.elapsed().as_secs_f64();
        s.resident = on;
        self.metrics.set_resident(&s.id, on);
        if on {
            self.metrics.model_wakes.get_or_create(&ModelLabel { model: s.id.clone() }).inc();
            if !std::mem::take(&mut s.never_woken) {
                s.wake_seconds = Some(s.wake_seconds.map_or(seconds, |w| 0.5 * (w + seconds)));
            }
        }
        tracing::info!(model = %s.id, resident = on, seconds, "model residency changed");
        self.publish_bytes();
        Ok(on)
    }

    /// Puts the least recently used idle models (never `keep`) to sleep until the resident set,
    /// with `waking` added, is within the bound, or none is left that can sleep (every other is
    /// busy: the bound is exceeded rather than work stalled). Answers the models put to sleep.
    pub(super) fn make_room(
        &mut self,
        waking: Option<usize>,
        keep: Option<usize>,
        busy: impl Fn(usize) -> bool,
    ) -> Vec<usize> {
        let mut slept = Vec::new();
        while self.over(waking) {
            let victim = (0..self.slots.len())
                .filter(|&i| {
                    let s = &self.slots[i];
                    Some(i) != keep && Some(i) != waking && s.resident && s.residency.is_some() && !busy(i)
                })
                .min_by_key(|&i| self.slots[i].last_used);
            let Some(v) = victim else { break };
            if let Err(e) = self.set(v, false, false) {
                tracing::warn!(model = %self.slots[v].id, "putting a model to sleep failed: {e}");
                break;
            }
            slept.push(v);
        }
        if let (true, Some(w)) = (self.over(waking), waking) {
            let waking = self.slots[w].id.as_str();
            tracing::warn!(waking, "waking past the residency bound: every other model on the device is busy");
        }
        slept
    }

    /// Whether the resident models exceed the bound (after a wake that could not make room).
    pub(super) fn is_over(&self) -> bool {
        self.over(None)
    }

    /// Whether the resident models, with `waking` brought back, exceed the bound.
    fn over(&self, waking: Option<usize>) -> bool {
        let adding = waking.filter(|&w| !self.is_resident(w));
        let count = self.slots.iter().filter(|s| s.resident).count() + adding.is_some() as usize;
        let bytes = self.sleepable_bytes() + adding.map_or(0, |w| self.bytes_of(w));
        self.max_count.is_some_and(|max| count > max) || self.max_bytes.is_some_and(|max| bytes > max)
    }

    fn bytes_of(&self, m: usize) -> u64 {
        self.slots[m].residency.as_ref().map_or(0, |r| r.bytes())
    }

    /// Bytes of the resident models that can sleep.
    fn sleepable_bytes(&self) -> u64 {
        (0..self.slots.len()).filter(|&i| self.slots[i].resident).map(|i| self.bytes_of(i)).sum()
    }

    fn publish_bytes(&self) {
        self.metrics.resident_weight_bytes.set(self.sleepable_bytes() as i64);
    }
}
