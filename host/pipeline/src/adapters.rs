//! LoRA adapters as a forward sees them: each adapter's per-module deltas on the model's device,
//! the set of adapters (with strengths) a request runs with, and which rows of a batched forward
//! run with which set. The model family prepares adapters for its own modules (it alone knows
//! which linear is which slot); the loop and the engine only carry them.

use std::fmt::Write as _;
use std::sync::Arc;

use tch::Tensor;

/// The value under which a run finds its request's adapter set ([`Value::Adapters`](crate::Value)),
/// when it has one: put there by whoever starts the run (the engine, the CLI).
pub const ADAPTERS: &str = "adapters";

/// One module's update from one adapter, on the model's device in its compute dtype.
pub struct ModuleDelta {
    /// The low-rank pair `(down [r, in], up [out, r])` and its own scale (`alpha / r`, or 1):
    /// `y += strength · scale · up(down(x))`.
    pub low_rank: Option<(Tensor, Tensor, f64)>,
    /// A full-weight difference `[out, in]` (`.diff`), scaled by the strength like the pair.
    pub diff: Option<Tensor>,
    /// A bias difference `[out]` (`.diff_b`), scaled by the strength like the pair.
    pub diff_b: Option<Tensor>,
}

/// An adapter prepared for one model: a delta per module slot the model numbered.
pub struct PreparedAdapter {
    /// The name requests use.
    pub name: String,
    /// blake3 of the file it came from.
    pub hash: String,
    /// By the model's module slot; `None` where the adapter leaves the module alone.
    pub deltas: Vec<Option<ModuleDelta>>,
    /// The text encoder's, by its module slot (empty when the adapter has none).
    pub text: Vec<Option<ModuleDelta>>,
    /// Device bytes its tensors hold (what the adapter cache budgets).
    pub bytes: u64,
}

// SAFETY: the tensors are written once when the adapter is prepared and only read afterwards;
// libtorch allows concurrent reads of a tensor from several threads.
unsafe impl Sync for PreparedAdapter {}

impl std::fmt::Debug for PreparedAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let modules = self.deltas.iter().filter(|d| d.is_some()).count();
        f.debug_struct("PreparedAdapter")
            .field("name", &self.name)
            .field("hash", &self.hash)
            .field("modules", &modules)
            .field("bytes", &self.bytes)
            .finish()
    }
}

impl PreparedAdapter {
    /// The delta for module `slot`, if the adapter changes that module.
    pub fn delta(&self, slot: usize) -> Option<&ModuleDelta> {
        self.deltas.get(slot).and_then(|d| d.as_ref())
    }

    /// The delta for the text encoder's module `slot`, if the adapter changes it.
    pub fn text_delta(&self, slot: usize) -> Option<&ModuleDelta> {
        self.text.get(slot).and_then(|d| d.as_ref())
    }

    /// Whether the adapter changes the text encoder.
    pub fn has_text(&self) -> bool {
        self.text.iter().any(Option::is_some)
    }
}

/// The adapters one request runs with, each with its strength, in the order the request named
/// them. Two sets with the same [`key`](Self::key) compute the same thing.
#[derive(Debug)]
pub struct AdapterSet {
    key: String,
    entries: Vec<(Arc<PreparedAdapter>, f64)>,
    /// For a set with entries bound to one expert of a two-expert model: the subset each
    /// expert runs (empty when every entry binds to every expert).
    experts: Vec<AdapterSet>,
}

impl AdapterSet {
    /// Strength-0 entries are dropped: they change nothing, and skipping them keeps a request
    /// with every strength at 0 bit-identical to one without adapters.
    pub fn new(entries: Vec<(Arc<PreparedAdapter>, f64)>) -> Self {
        let entries: Vec<_> = entries.into_iter().filter(|(_, s)| *s != 0.0).collect();
        let mut key = String::new();
        for (a, s) in &entries {
            let _ = write!(key, "{}:{}*{s};", a.name, a.hash);
        }
        Self { key, entries, experts: Vec::new() }
    }

    /// A set whose entries may each bind to one expert (`Some(index)`) of a two-expert model, or
    /// to every expert (`None`).
    pub fn bound(entries: Vec<(Arc<PreparedAdapter>, f64, Option<u32>)>) -> Self {
        if entries.iter().all(|(_, _, e)| e.is_none()) {
            return Self::new(entries.into_iter().map(|(a, s, _)| (a, s)).collect());
        }
        let subset = |x: u32| {
            let kept = entries.iter().filter(|(_, _, e)| e.is_none_or(|e| e == x));
            Self::new(kept.map(|(a, s, _)| (Arc::clone(a), *s)).collect())
        };
        let experts = vec![subset(0), subset(1)];
        let mut all = Self::new(entries.iter().map(|(a, s, _)| (Arc::clone(a), *s)).collect());
        all.key = format!("0[{}]1[{}]", experts[0].key, experts[1].key);
        all.experts = experts;
        all
    }

    /// Whether some entry binds to one expert (or loop) only.
    pub fn is_bound(&self) -> bool {
        !self.experts.is_empty()
    }

    /// What expert `e` runs: the entries bound to it or to every expert.
    pub fn for_expert(&self, e: u32) -> &AdapterSet {
        self.experts.get(e as usize).unwrap_or(self)
    }

    /// Identity of what the set computes: names, file hashes and strengths, in order.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Identity of what the set does to the text encoder (empty when nothing): prompt embeddings
    /// made with the set are cached under it.
    pub fn text_key(&self) -> String {
        let mut key = String::new();
        for (a, s) in self.entries.iter().filter(|(a, _)| a.has_text()) {
            let _ = write!(key, "{}:{}*{s};", a.name, a.hash);
        }
        key
    }

    /// The adapters and their strengths, in the request's order.
    pub fn entries(&self) -> &[(Arc<PreparedAdapter>, f64)] {
        &self.entries
    }

    /// Whether the set changes nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Which rows of a batched forward run with which adapter set: rows `start..start + len` of
/// dimension 0 of every activation. Rows in no group run without adapters.
#[derive(Default)]
pub struct AdapterRows<'a> {
    /// `(set, start, len)`, in row order.
    pub groups: Vec<(&'a AdapterSet, i64, i64)>,
    /// Whether these rows are the text encoder's (its deltas apply, not the transformer's).
    pub text: bool,
}

impl<'a> AdapterRows<'a> {
    /// Every row with `set`, or `None` when the set is empty (the forward then costs nothing).
    pub fn all(set: Option<&'a AdapterSet>, rows: i64) -> Option<Self> {
        set.filter(|s| !s.is_empty()).map(|s| Self { groups: vec![(s, 0, rows)], text: false })
    }

    /// Every row of every activation with `set`, however many rows each has (a causal session's
    /// chunk: one sample, whose timestep embedding has a row per frame).
    pub fn every(set: Option<&'a AdapterSet>) -> Option<Self> {
        set.filter(|s| !s.is_empty()).map(|s| Self { groups: vec![(s, 0, i64::MAX)], text: false })
    }

    /// Every row of the text encoder's activations with `set`'s text-encoder deltas, or `None`
    /// when the set has none.
    pub fn text(set: Option<&'a AdapterSet>) -> Option<Self> {
        let set = set.filter(|s| s.entries().iter().any(|(a, _)| a.has_text()))?;
        Some(Self { groups: vec![(set, 0, i64::MAX)], text: true })
    }

    /// Appends `len` rows with `set` (none: without adapters) after those already placed at
    /// `start`; adjacent rows of one set join one group, so they run as one GEMM.
    pub fn push(&mut self, set: Option<&'a AdapterSet>, start: i64, len: i64) {
        let Some(set) = set.filter(|s| !s.is_empty()) else { return };
        if let Some((last, s, l)) = self.groups.last_mut() {
            if last.key() == set.key() && *s + *l == start {
                *l += len;
                return;
            }
        }
        self.groups.push((set, start, len));
    }

    /// The groups as expert `e` runs them ([`AdapterSet::for_expert`]), dropping sets with
    /// nothing for it.
    pub fn for_expert(&self, e: u32) -> AdapterRows<'a> {
        let mut out = AdapterRows { groups: Vec::new(), text: self.text };
        for &(s, start, len) in &self.groups {
            out.push(Some(s.for_expert(e)), start, len);
        }
        out
    }

    /// The same groups with every row repeated `k` times in place (row `r` becomes rows
    /// `r·k .. r·k + k`): for inputs with `k` rows per sample, such as per-frame timesteps.
    pub fn repeat_rows(&self, k: i64) -> AdapterRows<'a> {
        let scale = |v: i64| v.saturating_mul(k);
        AdapterRows { groups: self.groups.iter().map(|&(s, a, l)| (s, scale(a), scale(l))).collect(), text: self.text }
    }

    /// Whether no row runs with adapters.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }
}
