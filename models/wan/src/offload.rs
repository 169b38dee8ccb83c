//! `--offload-experts`: a two-expert model (Wan 2.2 A14B) with one expert's weights on the
//! device at a time. The other waits in pinned host memory and comes back when a step needs it
//! (its linears, which hold all but a sliver of its parameters; norms and tables stay). Halves
//! the device memory the transformers take, at the cost of a swap when the running expert changes
//! (`docs/benchmarks.md` measures it); the scheduler's batch key keeps steps of one expert
//! together, and a request changes expert once.
//!
//! The low-noise expert loads first and leaves for host memory at once ([`ExpertSwap::park`]);
//! the high-noise expert then loads into the very device blocks it freed (the same shapes, so
//! libtorch's caching allocator hands them back), and every later swap does the same. Loading
//! both and evicting one would instead leave its blocks cached as fragments that no activation
//! fits in, and save nothing (measured on the H200).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{ensure, Result};
use tch::{Device, Tensor};

use crate::transformer::WanTransformer3DModel;

/// The two experts, one of them resident.
pub struct ExpertSwap {
    experts: Vec<Arc<WanTransformer3DModel>>,
    /// Pinned host copies of each expert's linear weights and biases, in `linears()` order.
    host: Vec<Vec<(Tensor, Option<Tensor>)>>,
    device: Device,
    resident: Mutex<usize>,
    swaps: AtomicU64,
    swap_nanos: AtomicU64,
}

// SAFETY: the host buffers are written only by `evict`, which runs in `park` (before the value
// exists) or under the `resident` lock in `ensure`; the rest is atomics and shared handles.
unsafe impl Sync for ExpertSwap {}

/// A host buffer like `t`: pinned where the device is CUDA (fast, asynchronous copies).
fn host_like(t: &Tensor, device: Device) -> Tensor {
    let h = Tensor::empty(t.size(), (t.kind(), Device::Cpu));
    match device {
        Device::Cuda(_) => h.f_pin_memory(device).unwrap_or(h),
        _ => h,
    }
}

/// Points `t`'s storage at `data` (every handle of `t` sees it).
fn repoint(t: &Tensor, data: &Tensor) {
    let mut t = t.shallow_clone();
    t.set_data(data);
}

/// Host buffers for `t`'s linears (weight, bias), pinned on CUDA.
type HostCopy = Vec<(Tensor, Option<Tensor>)>;

fn host_copy(t: &WanTransformer3DModel, device: Device) -> HostCopy {
    t.linears().iter().map(|l| (host_like(&l.weight, device), l.bias.as_ref().map(|b| host_like(b, device)))).collect()
}

/// Copies `t`'s linears (merged adapters included) to `host` and points them there, which frees
/// their device memory.
fn evict(t: &WanTransformer3DModel, host: &HostCopy, device: Device) {
    for (l, (w, b)) in t.linears().iter().zip(host) {
        if l.weight.device() != Device::Cpu || device == Device::Cpu {
            let mut w = w.shallow_clone();
            w.copy_(&l.weight);
            repoint(&l.weight, &w);
        }
        if let (Some(lb), Some(hb)) = (&l.bias, b) {
            let mut hb = hb.shallow_clone();
            hb.copy_(lb);
            repoint(lb, &hb);
        }
    }
}

/// Brings `t`'s linears back to `device` from `host`.
fn fetch(t: &WanTransformer3DModel, host: &HostCopy, device: Device) {
    for (l, (w, b)) in t.linears().iter().zip(host) {
        repoint(&l.weight, &w.to_device_(device, w.kind(), true, true));
        if let (Some(lb), Some(hb)) = (&l.bias, b) {
            repoint(lb, &hb.to_device_(device, hb.kind(), true, true));
        }
    }
}

/// An expert moved to host memory before the other loads (see the module docs).
pub struct Parked {
    expert: Arc<WanTransformer3DModel>,
    host: HostCopy,
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
        let host = host_copy(&expert, device);
        evict(&expert, &host, device);
        Parked { expert, host }
    }

    /// `first` resident on `device`, `second` parked.
    pub fn new(first: Arc<WanTransformer3DModel>, second: Parked, device: Device) -> Result<Self> {
        let host = vec![host_copy(&first, device), second.host];
        Ok(Self {
            experts: vec![first, second.expert],
            host,
            device,
            resident: Mutex::new(0),
            swaps: AtomicU64::new(0),
            swap_nanos: AtomicU64::new(0),
        })
    }

    /// Makes expert `e` the resident one (a no-op when it is). Call between forwards only.
    pub fn ensure(&self, e: u32) -> Result<()> {
        let e = e as usize;
        ensure!(e < self.experts.len(), "expert {e} of {}", self.experts.len());
        let mut resident = self.resident.lock().unwrap_or_else(|p| p.into_inner());
        if *resident == e {
            return Ok(());
        }
        let t0 = Instant::now();
        evict(&self.experts[*resident], &self.host[*resident], self.device);
        fetch(&self.experts[e], &self.host[e], self.device);
        if let Device::Cuda(i) = self.device {
            tch::Cuda::synchronize(i as i64);
        }
        *resident = e;
        self.swaps.fetch_add(1, Ordering::Relaxed);
        self.swap_nanos.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Which expert is on the device.
    pub fn resident(&self) -> u32 {
        *self.resident.lock().unwrap_or_else(|p| p.into_inner()) as u32
    }

    /// Swaps so far, and the seconds they took.
    pub fn swaps(&self) -> (u64, f64) {
        (self.swaps.load(Ordering::Relaxed), self.swap_nanos.load(Ordering::Relaxed) as f64 / 1e9)
    }
}
