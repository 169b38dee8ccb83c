//! Weights on their way to the device while the model already runs: `--offload-experts` streams
//! an expert in group by group (the embedders and head first, then one group per block), and
//! compute waits, on the device, for each group just before it reads it. The copies of later
//! blocks thus overlap the compute of earlier ones.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use anyhow::Result;
use fastvideo_kernels::transfer::Arrival;

/// The weight groups still arriving; empty almost always (then one atomic load per check).
#[derive(Default)]
pub struct Arrivals {
    pending: AtomicBool,
    /// Group 0: the linears outside the blocks; group `1 + i`: block `i`'s.
    groups: Mutex<Vec<Option<Arrival>>>,
}

/// The group of block `i`.
pub fn block_group(i: usize) -> usize {
    1 + i
}

/// The group of the linears outside the blocks.
pub const HEAD_GROUP: usize = 0;

impl Arrivals {
    /// Compute from now on must wait for `groups` (indexed as above) before reading them.
    pub fn expect(&self, groups: Vec<Option<Arrival>>) {
        let mut g = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        self.pending.store(groups.iter().any(Option::is_some), Ordering::Release);
        *g = groups;
    }

    /// Orders the compute queued next after group `group`'s copies (once; later calls are free).
    pub fn await_group(&self, group: usize) -> Result<()> {
        if !self.pending.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut g = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(a) = g.get_mut(group).and_then(Option::take) {
            a.await_on_compute()?;
        }
        if g.iter().all(Option::is_none) {
            self.pending.store(false, Ordering::Release);
        }
        Ok(())
    }

    /// Orders the compute queued next after every group (for paths that do not go block by
    /// block).
    pub fn await_all(&self) -> Result<()> {
        if !self.pending.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut g = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        for a in g.iter_mut().filter_map(Option::take) {
            a.await_on_compute()?;
        }
        self.pending.store(false, Ordering::Release);
        Ok(())
    }
}
