//! Host-to-device copies on a stream of their own, so they overlap the compute that libtorch
//! queues on the legacy default stream.
//!
//! Used to stream weights in while earlier layers run (`--offload-experts`): the copies of
//! layer `i + 1` proceed while layer `i` computes, and compute waits (on the device, never on the
//! host) only for the layer it is about to read. Ordering in both directions is by CUDA events:
//! [`Transfer::after_compute`] makes later copies wait for the compute queued so far (the
//! destination memory may still be read by it), and [`Arrival::await_on_compute`] makes later
//! compute wait for one batch of copies.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use anyhow::{anyhow, ensure, Result};
use cudarc::driver::{CudaContext, CudaEvent, CudaStream};
use tch::{Device, Tensor};

/// The copy stream of one device.
pub struct Transfer {
    ordinal: usize,
    /// A non-blocking stream: the legacy default stream does not wait for it implicitly, which is
    /// what lets copies and compute overlap.
    copy: Arc<CudaStream>,
    compute: Arc<CudaStream>,
}

/// The copies queued before it, as an event compute can wait on.
pub struct Arrival(CudaEvent);

static STREAMS: OnceLock<Mutex<HashMap<usize, Option<Arc<Transfer>>>>> = OnceLock::new();

impl Transfer {
    /// The copy stream of CUDA device `ordinal`, or `None` when the CUDA driver cannot be used
    /// (callers then copy synchronously with tch).
    pub fn for_device(device: Device) -> Option<Arc<Transfer>> {
        let Device::Cuda(ordinal) = device else { return None };
        let map = STREAMS.get_or_init(|| Mutex::new(HashMap::new()));
        let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(ordinal)
            .or_insert_with(|| match Self::open(ordinal) {
                Ok(t) => Some(Arc::new(t)),
                Err(e) => {
                    tracing::warn!(ordinal, error = %format!("{e:#}"), "no copy stream; copies will not overlap compute");
                    None
                }
            })
            .clone()
    }

    fn open(ordinal: usize) -> Result<Self> {
        let ctx = std::panic::catch_unwind(|| CudaContext::new(ordinal))
            .map_err(|_| anyhow!("the CUDA driver library could not be loaded"))?
            .map_err(|e| anyhow!("CUDA context for device {ordinal}: {e}"))?;
        let copy = ctx.new_stream().map_err(|e| anyhow!("copy stream: {e}"))?;
        Ok(Self { ordinal, copy, compute: ctx.default_stream() })
    }

    /// Copies queued from now on start only after the compute queued so far has finished.
    pub fn after_compute(&self) -> Result<()> {
        self.copy.join(&self.compute).map_err(|e| anyhow!("ordering copies after compute: {e}"))
    }

    /// Queues a copy of host tensor `src` (pinned, or the copy does not overlap) into device
    /// tensor `dst`: same dtype, same number of elements, both contiguous.
    ///
    /// The caller keeps both alive until the copy is known done (an [`Arrival`] awaited and the
    /// compute after it finished, or [`synchronize`](Self::synchronize)).
    pub fn upload(&self, dst: &Tensor, src: &Tensor) -> Result<()> {
        ensure!(dst.device() == Device::Cuda(self.ordinal), "upload: destination on {:?}", dst.device());
        ensure!(src.device() == Device::Cpu, "upload: source on {:?}", src.device());
        ensure!(
            dst.kind() == src.kind() && dst.numel() == src.numel(),
            "upload: {:?}{:?} into {:?}{:?}",
            src.kind(),
            src.size(),
            dst.kind(),
            dst.size()
        );
        ensure!(dst.is_contiguous() && src.is_contiguous(), "upload: tensors must be contiguous");
        let bytes = src.numel() * src.kind().elt_size_in_bytes();
        if bytes == 0 {
            return Ok(());
        }
        // SAFETY: both regions hold `bytes` bytes (checked above: same dtype and element count,
        // contiguous); the caller keeps them alive until the copy is done (see the docs).
        unsafe {
            let host = std::slice::from_raw_parts(src.data_ptr() as *const u8, bytes);
            cudarc::driver::result::memcpy_htod_async(dst.data_ptr() as u64, host, self.copy.cu_stream())
        }
        .map_err(|e| anyhow!("upload of {bytes} bytes: {e}"))
    }

    /// The copies queued so far, as an event compute can wait on.
    pub fn mark(&self) -> Result<Arrival> {
        self.copy.record_event(None).map(Arrival).map_err(|e| anyhow!("recording a copy event: {e}"))
    }

    /// Blocks the host until every queued copy has finished.
    pub fn synchronize(&self) -> Result<()> {
        self.copy.synchronize().map_err(|e| anyhow!("waiting for copies: {e}"))
    }
}

impl Arrival {
    /// Compute queued from now on waits (on the device) for the copies this arrival marks.
    pub fn await_on_compute(&self) -> Result<()> {
        let ctx = self.0.context();
        ctx.default_stream().wait(&self.0).map_err(|e| anyhow!("waiting for copies: {e}"))
    }
}
