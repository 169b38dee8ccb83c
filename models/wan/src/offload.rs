//! `--offload-experts`: a two-expert model (Wan 2.2 A14B) with one expert's weights on the
//! device at a time. The other waits in pinned host memory and comes back when a step needs it
//! (its linears, which hold all but a sliver of its parameters; norms and tables stay). Halves
//! the device memory the transformers take, at the cost of a swap when the running expert changes
//! (`docs/benchmarks.md` measures it); the scheduler's batch key keeps steps of one expert
//! together, and a request changes expert once.

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

// SAFETY: the host buffers are written only by `evict`, which runs in `new` (before the value is
// shared) or under the `resident` lock in `ensure`; the rest is atomics and shared handles.
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

impl ExpertSwap {
    /// Keeps expert 0 on `device` and moves the others' linears to pinned host memory.
    pub fn new(experts: Vec<Arc<WanTransformer3DModel>>, device: Device) -> Result<Self> {
        ensure!(experts.len() >= 2, "offloading experts needs a model with two");
        let host = experts
            .iter()
            .map(|t| {
                t.linears()
                    .iter()
                    .map(|l| (host_like(&l.weight, device), l.bias.as_ref().map(|b| host_like(b, device))))
                    .collect()
            })
            .collect();
        let swap = Self {
            experts,
            host,
            device,
            resident: Mutex::new(0),
            swaps: AtomicU64::new(0),
            swap_nanos: AtomicU64::new(0),
        };
        for i in 1..swap.experts.len() {
            swap.evict(i);
        }
        Ok(swap)
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
        self.evict(*resident);
        self.fetch(e);
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

    /// Copies expert `i`'s current linears (merged adapters included) to its host buffers and
    /// points them there, which frees their device memory.
    fn evict(&self, i: usize) {
        for (l, (w, b)) in self.experts[i].linears().iter().zip(&self.host[i]) {
            if l.weight.device() != Device::Cpu || self.device == Device::Cpu {
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

    /// Brings expert `i`'s linears back to the device.
    fn fetch(&self, i: usize) {
        let kind = |t: &Tensor| t.kind();
        for (l, (w, b)) in self.experts[i].linears().iter().zip(&self.host[i]) {
            repoint(&l.weight, &w.to_device_(self.device, kind(w), true, true));
            if let (Some(lb), Some(hb)) = (&l.bias, b) {
                repoint(lb, &hb.to_device_(self.device, kind(hb), true, true));
            }
        }
    }
}
