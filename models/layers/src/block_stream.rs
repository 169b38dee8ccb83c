//! `--max-device-memory`: the last blocks of a model keep their linears in pinned host memory
//! and pass, one block at a time, through a few device slots. While block `i` computes, the copy
//! stream fills the slot block `i` frees with the block `slots` ahead, so a forward waits for a
//! copy only when a block's compute is shorter than its copy (docs/operators.md measures it).
//!
//! The cycle runs over the streamed blocks in order and wraps: after the last streamed block of
//! one forward the slots fill with the first ones of the next, which copy while the resident
//! blocks (the first ones) compute. A block's linears are repointed at its slot just before it
//! runs ([`BlockStream::before`]), so every handle the model holds sees the move; nothing else
//! may read a streamed block's linears (merging adapters is refused while streaming).
//!
//! Which blocks stream and how many slots is the family's loader's choice ([`StreamPlan`]); the
//! streamed blocks are parked in host memory as each loads ([`park`]), so loading never holds
//! more than one streamed block on the device.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{ensure, Result};
use fastvideo_kernels::transfer::{Arrival, Transfer};
use tch::{Device, Tensor};

use crate::linear::{tensor_bytes, Linear};
use crate::offload::{copy_group, host_copy, repoint, same_group, upload_group};

/// Which of a model's blocks stream, and through how many device slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamPlan {
    /// Blocks `first..` stream; the ones before stay on the device.
    pub first: usize,
    /// Device slots the streamed blocks pass through (at least one; two overlap copy and
    /// compute).
    pub slots: usize,
}

/// A block's linear tensors: (weight, bias) per linear, in the block's order.
pub type BlockTensors = Vec<(Tensor, Option<Tensor>)>;

/// Moves a just-loaded block's linears to host memory (pinned on CUDA) and points them there;
/// the device tensors go back to the allocator, which hands them to the next block loaded.
pub fn park(linears: &[&Linear], device: Device) -> BlockTensors {
    let host = host_copy(&[linears.to_vec()], device).remove(0);
    point_block(linears, &host);
    host
}

fn point_block(linears: &[&Linear], data: &BlockTensors) {
    for (l, (w, b)) in linears.iter().zip(data) {
        repoint(&l.weight, w);
        if let (Some(lb), Some(b)) = (&l.bias, b) {
            repoint(lb, b);
        }
    }
}

/// The streamed blocks of one model and the device slots they pass through.
pub struct BlockStream {
    first: usize,
    /// Each streamed block's linears in host memory, by streamed index.
    host: Vec<BlockTensors>,
    slots: Vec<BlockTensors>,
    /// The copy stream; `None` on the CPU or without a usable CUDA driver (copies then block).
    transfer: Option<Arc<Transfer>>,
    state: Mutex<SlotState>,
    block_bytes: u64,
    uploads: AtomicU64,
}

/// Which streamed block each slot holds, and the copies into it not yet awaited.
struct SlotState {
    holds: Vec<Option<usize>>,
    arriving: Vec<Option<Arrival>>,
}

// SAFETY: tensors are repointed and slots refilled only under `state`'s lock, from the forward
// that runs the model (one at a time, like every weight change); the rest is shared handles.
unsafe impl Sync for BlockStream {}
unsafe impl Send for BlockStream {}

impl Drop for BlockStream {
    fn drop(&mut self) {
        // Copies in flight read host buffers this drop frees.
        if let Some(t) = &self.transfer {
            let _ = t.synchronize();
        }
    }
}

impl BlockStream {
    /// Streams blocks `first..first + parked.len()` (each [`park`]ed as it loaded) through
    /// `slots` device buffers on `device`, and fills the slots with the first streamed blocks.
    pub fn new(first: usize, parked: Vec<BlockTensors>, slots: usize, device: Device) -> Result<Self> {
        ensure!(!parked.is_empty(), "block streaming: no block to stream");
        ensure!(slots >= 1, "block streaming: at least one device slot");
        if let Some(j) = parked.iter().position(|p| !same_group(p, &parked[0])) {
            anyhow::bail!(
                "block streaming: block {} stores its linears unlike block {first} (another shape or type, as in a \
                 mixed quantization); streamed blocks must be alike",
                first + j
            );
        }
        let slots = slots.min(parked.len());
        let like = |t: &Tensor| Tensor::empty(t.size(), (t.kind(), device));
        let buffers: Vec<BlockTensors> =
            (0..slots).map(|_| parked[0].iter().map(|(w, b)| (like(w), b.as_ref().map(like))).collect()).collect();
        let block_bytes = parked[0].iter().map(|(w, b)| tensor_bytes(w) + b.as_ref().map_or(0, tensor_bytes)).sum();
        let stream = Self {
            first,
            host: parked,
            slots: buffers,
            transfer: Transfer::for_device(device),
            state: Mutex::new(SlotState { holds: vec![None; slots], arriving: (0..slots).map(|_| None).collect() }),
            block_bytes,
            uploads: AtomicU64::new(0),
        };
        {
            let mut st = stream.lock();
            for s in 0..slots {
                stream.fill(&mut st, s, s)?;
            }
        }
        Ok(stream)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SlotState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The streamed index of model block `block`, if it streams.
    fn streamed(&self, block: usize) -> Option<usize> {
        block.checked_sub(self.first).filter(|&j| j < self.host.len())
    }

    /// Makes block `block`'s weights readable by the compute queued next (a no-op for a resident
    /// block): its slot's copies awaited on the device, its `linears` pointed at the slot. A block
    /// no slot holds (the cycle broken by an error) is copied in first.
    pub fn before(&self, block: usize, linears: &[&Linear]) -> Result<()> {
        let Some(j) = self.streamed(block) else { return Ok(()) };
        let mut st = self.lock();
        let s = match st.holds.iter().position(|h| *h == Some(j)) {
            Some(s) => s,
            None => {
                let s = j % self.slots.len();
                self.fill(&mut st, s, j)?;
                s
            }
        };
        if let Some(a) = st.arriving[s].take() {
            a.await_on_compute()?;
        }
        point_block(linears, &self.slots[s]);
        Ok(())
    }

    /// Block `block` has been queued (or skipped): its slot takes the streamed block `slots`
    /// ahead, once the compute queued so far is done with it.
    pub fn after(&self, block: usize) -> Result<()> {
        let Some(j) = self.streamed(block) else { return Ok(()) };
        let next = (j + self.slots.len()) % self.host.len();
        let mut st = self.lock();
        match st.holds.iter().position(|h| *h == Some(j)) {
            Some(s) if next != j && !st.holds.contains(&Some(next)) => self.fill(&mut st, s, next),
            _ => Ok(()),
        }
    }

    /// Copies streamed block `j` into slot `s`: queued on the copy stream after the compute
    /// queued so far (which may still read the slot), or at once without one.
    fn fill(&self, st: &mut SlotState, s: usize, j: usize) -> Result<()> {
        st.holds[s] = Some(j);
        self.uploads.fetch_add(1, Ordering::Relaxed);
        let Some(t) = &self.transfer else {
            copy_group(&self.slots[s], &self.host[j]);
            return Ok(());
        };
        // A failed copy leaves the slot's content unknown: it holds nothing until refilled.
        let queued =
            t.after_compute().and_then(|()| upload_group(t, &self.slots[s], &self.host[j])).and_then(|()| t.mark());
        match queued {
            Ok(a) => {
                st.arriving[s] = Some(a);
                Ok(())
            }
            Err(e) => {
                st.holds[s] = None;
                Err(e.context(format!("streaming block {} to the device", self.first + j)))
            }
        }
    }

    /// Blocks streamed, device slots, and bytes of one block's linears.
    pub fn shape(&self) -> (usize, usize, u64) {
        (self.host.len(), self.slots.len(), self.block_bytes)
    }

    /// The first streamed block.
    pub fn first(&self) -> usize {
        self.first
    }

    /// Blocks copied to the device so far.
    pub fn uploads(&self) -> u64 {
        self.uploads.load(Ordering::Relaxed)
    }
}
