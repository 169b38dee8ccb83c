//! NCCL between GPUs of this process, through cudarc's bindings (libnccl is loaded at run time:
//! builds and CPU machines never need it). One communicator per rank from `ncclCommInitAll`;
//! every operation is enqueued on the legacy default stream, the stream libtorch runs its ops on
//! (../shared/TOOLCHAIN.md), so it is ordered after the kernels that produced its inputs and
//! before the ones that read its outputs, without an extra synchronisation.

use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{anyhow, bail, ensure, Result};
use cudarc::driver::CudaContext;
use cudarc::nccl::{result, sys};
use tch::{Device, Kind, Tensor};

use crate::comm::{check_call, Communicator};

/// One rank's NCCL communicator.
pub struct NcclComm {
    comm: sys::ncclComm_t,
    rank: usize,
    size: usize,
    ordinal: usize,
    ctx: Arc<CudaContext>,
    /// Set by [`abort`](Communicator::abort); the communicator is unusable afterwards.
    aborted: AtomicBool,
    reason: Mutex<Option<String>>,
}

// SAFETY: an NCCL communicator may be used from any thread as long as calls on it do not
// overlap: each rank's worker thread is its only caller during a forward, and the pool calls
// `abort` only after that rank has returned (or after the pool's timeout has given up on it).
unsafe impl Send for NcclComm {}
unsafe impl Sync for NcclComm {}

/// Whether libnccl can be loaded, with what to do when it cannot.
pub fn available() -> Result<()> {
    // SAFETY: only tries to dlopen the library's candidate names.
    if unsafe { sys::is_culib_present() } {
        return Ok(());
    }
    bail!(
        "NCCL (libnccl.so) was not found on LD_LIBRARY_PATH; it ships with PyTorch's CUDA wheels as \
         nvidia/nccl/lib/libnccl.so.2 (link it as libnccl.so: host/scripts/gpu/torch_env.sh does), \
         or set FASTVIDEO_COLLECTIVE=local to exchange through in-process copies"
    )
}

/// The version of the loaded libnccl, e.g. 22803 for 2.28.3.
pub fn version() -> Result<i32> {
    available()?;
    result::get_nccl_version().map_err(|e| nccl_error("ncclGetVersion", e))
}

fn nccl_error(what: &str, e: result::NcclError) -> anyhow::Error {
    // SAFETY: NCCL returns a static string for every result code.
    let text = unsafe { CStr::from_ptr(sys::ncclGetErrorString(e.0)) }.to_string_lossy().into_owned();
    anyhow!("{what}: {:?} ({text})", e.0)
}

/// A group of ranks on the given GPUs (rank `i` on `ordinals[i]`, all distinct).
pub fn group(ordinals: &[usize]) -> Result<Vec<NcclComm>> {
    available()?;
    let n = ordinals.len();
    let mut sorted = ordinals.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    ensure!(sorted.len() == n, "NCCL ranks need distinct GPUs, got {ordinals:?}");
    // Contexts first: nothing to clean up if one cannot be made.
    let ctxs = ordinals
        .iter()
        .map(|&o| CudaContext::new(o).map_err(|e| anyhow!("CUDA device {o}: {e:?}")))
        .collect::<Result<Vec<_>>>()?;
    let devs: Vec<i32> = ordinals.iter().map(|&o| o as i32).collect();
    let mut comms: Vec<sys::ncclComm_t> = vec![std::ptr::null_mut(); n];
    // SAFETY: `comms` has room for `n` communicators and `devs` lists `n` devices.
    unsafe { result::comm_init_all(comms.as_mut_ptr(), n as i32, devs.as_ptr()) }
        .map_err(|e| nccl_error("ncclCommInitAll", e))?;
    let mut out = Vec::with_capacity(n);
    for (rank, ((&comm, &ordinal), ctx)) in comms.iter().zip(ordinals).zip(ctxs).enumerate() {
        out.push(NcclComm {
            comm,
            rank,
            size: n,
            ordinal,
            ctx,
            aborted: AtomicBool::new(false),
            reason: Mutex::new(None),
        });
    }
    Ok(out)
}

fn dtype(kind: Kind) -> Result<sys::ncclDataType_t> {
    use sys::ncclDataType_t::*;
    Ok(match kind {
        Kind::Float => ncclFloat32,
        Kind::BFloat16 => ncclBfloat16,
        Kind::Half => ncclFloat16,
        Kind::Double => ncclFloat64,
        Kind::Int64 => ncclInt64,
        Kind::Int => ncclInt32,
        Kind::Uint8 => ncclUint8,
        Kind::Int8 => ncclInt8,
        other => bail!("NCCL cannot exchange {other:?} tensors"),
    })
}

impl NcclComm {
    fn check_open(&self) -> Result<()> {
        if self.aborted.load(Ordering::Acquire) {
            let why = self.reason.lock().unwrap_or_else(|e| e.into_inner()).clone().unwrap_or_default();
            bail!("rank {}: the NCCL group was aborted: {why}", self.rank);
        }
        Ok(())
    }
}

impl Communicator for NcclComm {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }

    fn all_to_all(&self, send: &[Tensor], recv_shapes: &[Vec<i64>]) -> Result<Vec<Tensor>> {
        check_call(self, send, recv_shapes)?;
        self.check_open()?;
        let device = Device::Cuda(self.ordinal);
        let kind = send.first().map(Tensor::kind).unwrap_or(Kind::Float);
        let dt = dtype(kind)?;
        let send: Vec<Tensor> = send
            .iter()
            .map(|t| {
                ensure!(
                    t.device() == device && t.kind() == kind,
                    "rank {}: piece on {:?} as {:?}",
                    self.rank,
                    t.device(),
                    t.kind()
                );
                Ok(t.contiguous())
            })
            .collect::<Result<_>>()?;
        let recv: Vec<Tensor> = recv_shapes.iter().map(|s| Tensor::empty(s.as_slice(), (kind, device))).collect();
        self.ctx.bind_to_thread().map_err(|e| anyhow!("CUDA device {}: {e:?}", self.ordinal))?;
        // The legacy default stream (libtorch's, see the module docs).
        let stream: sys::cudaStream_t = std::ptr::null_mut();
        result::group_start().map_err(|e| nccl_error("ncclGroupStart", e))?;
        let mut failed = None;
        for (peer, (s, r)) in send.iter().zip(&recv).enumerate() {
            // SAFETY: both buffers are contiguous device tensors of `numel` elements of `dt` on
            // this communicator's GPU, alive until the enqueued copies have read or written them
            // (`send`/`recv` outlive this call; freed memory is reused only by later work on the
            // same stream).
            let r = (|| -> Result<()> {
                unsafe {
                    if s.numel() > 0 {
                        result::send(s.data_ptr(), s.numel(), dt, peer as i32, self.comm, stream)
                            .map_err(|e| nccl_error("ncclSend", e))?;
                    }
                    if r.numel() > 0 {
                        result::recv(r.data_ptr(), r.numel(), dt, peer as i32, self.comm, stream)
                            .map_err(|e| nccl_error("ncclRecv", e))?;
                    }
                }
                Ok(())
            })();
            if let Err(e) = r {
                failed = Some(e);
                break;
            }
        }
        let end = result::group_end().map_err(|e| nccl_error("ncclGroupEnd", e));
        if let Some(e) = failed {
            return Err(e);
        }
        end?;
        Ok(recv)
    }

    fn abort(&self, reason: &str) {
        if self.aborted.swap(true, Ordering::AcqRel) {
            return;
        }
        *self.reason.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason.to_string());
        // SAFETY: `comm` is live (aborted at most once, here); abort releases its resources and
        // stops any of its kernels still waiting for a peer.
        if let Err(e) = unsafe { result::comm_abort(self.comm) } {
            tracing::warn!(rank = self.rank, error = %nccl_error("ncclCommAbort", e), "NCCL abort failed");
        }
    }
}

impl Drop for NcclComm {
    fn drop(&mut self) {
        if !self.aborted.load(Ordering::Acquire) {
            // SAFETY: the communicator is live and nothing else uses it any more.
            let _ = unsafe { result::comm_destroy(self.comm) };
        }
    }
}
