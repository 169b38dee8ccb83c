//! `--offload-experts`: a two-expert model (Wan 2.2 A14B) with one expert's weights on the
//! device at a time. The other waits in pinned host memory and comes back when a step needs it
//! (its linears, which hold all but a sliver of its parameters; norms and tables stay). Halves
//! the device memory the transformers take; the scheduler's batch key keeps steps of one expert
//! together, and a request changes expert once.
//!
//! A swap streams: the incoming expert's linears are copied, group by group in the order a
//! forward reads them (embedders and head, then block after block), on a copy stream of their
//! own into one fixed set of device buffers, and the first forward waits on the device for each
//! block's weights just before the block runs ([`Arrivals`](crate::transformer::Arrivals)). The
//! copies of later blocks overlap the compute of earlier ones, so a switch costs about one
//! block's copy instead of the whole expert's (`docs/benchmarks.md` measures both). Leaving
//! costs nothing: merging adapters is refused while experts are offloaded, so an expert's host
//! copy is never stale and the outgoing expert simply points back at it.
//!
//! The low-noise expert loads first and leaves for host memory at once ([`ExpertSwap::park`]);
//! the high-noise expert then loads into the very device blocks it freed (the same shapes, so
//! libtorch's caching allocator hands them back), and those blocks are the buffers every later
//! swap fills. Loading both and evicting one would instead leave its blocks cached as fragments
//! that no activation fits in, and save nothing (measured on the H200).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{ensure, Result};
use fastvideo_kernels::transfer::Transfer;
use fastvideo_layers::offload::{copy_group, host_copy, map_linears, point, same_layout, upload_group, Groups};
use tch::{Device, Tensor};

use crate::transformer::WanTransformer3DModel;

/// The two experts, one of them resident.
pub struct ExpertSwap {
    experts: Vec<Arc<WanTransformer3DModel>>,
    /// Pinned host copies of each expert's linears.
    host: Vec<Groups>,
    /// The device buffers the resident expert's linears live in (their own tensor handles, so
    /// pointing a linear elsewhere leaves them be).
    buffers: Groups,
    device: Device,
    /// The copy stream; `None` on the CPU or without a usable CUDA driver (copies then block).
    transfer: Option<Arc<Transfer>>,
    /// Stream swaps (the default); off, a swap waits for its copies before returning.
    overlap: AtomicBool,
    resident: Mutex<usize>,
    swaps: AtomicU64,
    swap_nanos: AtomicU64,
}

// SAFETY: the tensors are repointed only in `park` (before the value exists) and under the
// `resident` lock in `ensure`, which callers run between forwards; the rest is atomics and shared
// handles.
unsafe impl Sync for ExpertSwap {}

impl Drop for ExpertSwap {
    fn drop(&mut self) {
        // Copies in flight read host buffers this drop frees.
        if let Some(t) = &self.transfer {
            let _ = t.synchronize();
        }
    }
}

/// An expert moved to host memory before the other loads (see the module docs).
pub struct Parked {
    expert: Arc<WanTransformer3DModel>,
    host: Groups,
}

impl Parked {
    /// The parked expert.
    pub fn expert(&self) -> &Arc<WanTransformer3DModel> {
        &self.expert
    }
}

impl ExpertSwap {
    /// Moves `expert`'s linears to (pinned) host memory right after it loaded.
    pub fn park(expert: Arc<WanTransformer3DModel>, device: Device) -> Parked {
        let host = host_copy(&expert.linear_groups(), device);
        point(&expert.linear_groups(), &host);
        Parked { expert, host }
    }

    /// `first` resident on `device`, `second` parked.
    pub fn new(first: Arc<WanTransformer3DModel>, second: Parked, device: Device) -> Result<Self> {
        let buffers = map_linears(&first.linear_groups(), Tensor::detach);
        ensure!(
            same_layout(&buffers, &second.host),
            "offloaded experts: the two transformers' linears differ in shape"
        );
        let host = vec![host_copy(&first.linear_groups(), device), second.host];
        Ok(Self {
            experts: vec![first, second.expert],
            host,
            buffers,
            device,
            transfer: Transfer::for_device(device),
            overlap: AtomicBool::new(true),
            resident: Mutex::new(0),
            swaps: AtomicU64::new(0),
            swap_nanos: AtomicU64::new(0),
        })
    }

    /// Streamed swaps (`true`, the default) or blocking ones (for measuring what streaming saves).
    pub fn set_overlap(&self, on: bool) {
        self.overlap.store(on, Ordering::Relaxed);
    }

    /// Makes expert `e` the resident one (a no-op when it is). Call between forwards only; with a
    /// copy stream this returns once the copies are queued, and the next forward waits for each
    /// block's weights on the device.
    pub fn ensure(&self, e: u32) -> Result<()> {
        let e = e as usize;
        ensure!(e < self.experts.len(), "expert {e} of {}", self.experts.len());
        let mut resident = self.resident.lock().unwrap_or_else(|p| p.into_inner());
        if *resident == e {
            return Ok(());
        }
        ensure!(
            self.experts[*resident].merged_adapters().is_none(),
            "offloaded experts: adapters merged into the resident expert would be lost by a swap"
        );
        let t0 = Instant::now();
        let arrivals = match self.fill(e) {
            Ok(a) => a,
            Err(err) => {
                // The buffers may hold part of each expert now: put the resident one back whole
                // (blocking) so the model stays usable, and report the failure.
                let restored =
                    self.fill(*resident).and_then(|_| self.transfer.as_ref().map_or(Ok(()), |t| t.synchronize()));
                return Err(match restored {
                    Ok(()) => err.context("swapping experts (the resident expert was restored)"),
                    Err(r) => err.context(format!("swapping experts; restoring the resident one failed too: {r:#}")),
                });
            }
        };
        match (&self.transfer, self.overlap.load(Ordering::Relaxed)) {
            (Some(_), true) => self.experts[e].arrivals.expect(arrivals),
            (Some(t), false) => t.synchronize()?,
            (None, _) => {}
        }
        point(&self.experts[*resident].linear_groups(), &self.host[*resident]);
        point(&self.experts[e].linear_groups(), &self.buffers);
        *resident = e;
        self.swaps.fetch_add(1, Ordering::Relaxed);
        self.swap_nanos.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Copies expert `e`'s host weights into the device buffers: queued on the copy stream, one
    /// arrival per group, or at once without one.
    fn fill(&self, e: usize) -> Result<Vec<Option<fastvideo_kernels::transfer::Arrival>>> {
        let pairs = self.buffers.iter().zip(&self.host[e]);
        let Some(t) = &self.transfer else {
            pairs.for_each(|(dev, host)| copy_group(dev, host));
            return Ok(Vec::new());
        };
        t.after_compute()?;
        pairs.map(|(dev, host)| upload_group(t, dev, host).and_then(|()| t.mark().map(Some))).collect()
    }

    /// Which expert is on the device.
    pub fn resident(&self) -> u32 {
        *self.resident.lock().unwrap_or_else(|p| p.into_inner()) as u32
    }

    /// Swaps so far, and the seconds the host spent in them (with streaming, queueing only: the
    /// copies' cost shows in the forward after the swap).
    pub fn swaps(&self) -> (u64, f64) {
        (self.swaps.load(Ordering::Relaxed), self.swap_nanos.load(Ordering::Relaxed) as f64 / 1e9)
    }

    /// The device, for callers that time a swap with the forward after it.
    pub fn device(&self) -> Device {
        self.device
    }
}
