//! CUDA graphs of libtorch work: capture what a closure queues on the GPU once, then replay it
//! with one launch. For decode steps, whose time is the host launching a few hundred small
//! kernels rather than the GPU running them.
//!
//! tch has no capture API and libtorch's `at::cuda::CUDAGraph` is a C++ class, so capture goes
//! through a small C++ library of ours (`kernels/cpp/cuda_graph.cpp`, built by
//! `host/scripts/gpu/build_graph_shim.sh` against the same libtorch) loaded at run time from
//! beside the binary (or `FASTVIDEO_GRAPH_SHIM`). Without it, or on a machine without CUDA,
//! [`available`] is false and callers run their ops eagerly: nothing here is touched.
//!
//! During a capture, libtorch runs on a side stream the shim makes current, and our own kernels
//! ([`crate::cuda`]) launch onto that stream too ([`capture_stream`]); replays run on the
//! default stream, ordered with everything else there.

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::ptr::NonNull;
use std::sync::OnceLock;

use anyhow::{anyhow, bail, Result};
use tch::Device;

type Begin = unsafe extern "C" fn(c_int, *mut c_void, *mut *mut c_void, *mut c_char, usize) -> c_int;
type Step = unsafe extern "C" fn(*mut c_void, *mut c_char, usize) -> c_int;
type Free = unsafe extern "C" fn(*mut c_void);
type Stream = unsafe extern "C" fn(c_int) -> *mut c_void;
type Version = unsafe extern "C" fn() -> c_int;
type MemStats = unsafe extern "C" fn(c_int, *mut i64, *mut c_char, usize) -> c_int;
type MemReset = unsafe extern "C" fn(c_int, c_int, *mut c_char, usize) -> c_int;
type MemLimit = unsafe extern "C" fn(c_int, f64, *mut c_char, usize) -> c_int;

/// The C ABI version this code speaks (`fv_graph_version`).
const ABI: c_int = 1;
/// The libtorch the binary is built for (tch 0.24: 2.11), as `fv_graph_torch_version` says it.
const TORCH: c_int = 211;

struct Shim {
    _lib: libloading::Library,
    begin: Begin,
    end: Step,
    replay: Step,
    free: Free,
    stream: Stream,
    /// The allocator's counters (optional: a shim built before they existed lacks them).
    memory: Option<(MemStats, MemReset)>,
    /// `fv_memory_limit`, in shims built since the device budget.
    limit: Option<MemLimit>,
}

static SHIM: OnceLock<Option<Shim>> = OnceLock::new();

thread_local! {
    /// The stream a capture on this thread records (null: none running).
    static CAPTURING: Cell<*mut c_void> = const { Cell::new(std::ptr::null_mut()) };
}

/// Where the shim is looked for.
fn shim_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("FASTVIDEO_GRAPH_SHIM") {
        return Some(PathBuf::from(p));
    }
    Some(std::env::current_exe().ok()?.parent()?.join("libfastvideo_graph.so"))
}

fn shim() -> Option<&'static Shim> {
    SHIM.get_or_init(|| {
        if std::env::var_os("FASTVIDEO_NO_GRAPHS").is_some() || !crate::enabled() {
            return None;
        }
        let path = shim_path()?;
        if !path.exists() {
            tracing::debug!(path = %path.display(), "no CUDA-graph library; decode steps run eagerly");
            return None;
        }
        match load(&path) {
            Ok(s) => {
                tracing::info!(path = %path.display(), "CUDA graphs available");
                Some(s)
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %format!("{e:#}"), "CUDA-graph library unusable; running eagerly");
                None
            }
        }
    })
    .as_ref()
}

fn load(path: &std::path::Path) -> Result<Shim> {
    // SAFETY: the library's constructors are those of a small C++ file; its symbols are looked
    // up by the exact signatures `kernels/cpp/cuda_graph.cpp` declares, and the version is
    // checked before any other is called.
    unsafe {
        let lib = libloading::Library::new(path)?;
        let version: Version = *lib.get(b"fv_graph_version\0")?;
        let v = version();
        if v != ABI {
            bail!("ABI version {v}, this binary needs {ABI}: rebuild it with build_graph_shim.sh");
        }
        let torch: Version = *lib.get(b"fv_graph_torch_version\0")?;
        let t = torch();
        if t != TORCH {
            bail!("built against libtorch {}.{}, this binary runs {}.{}", t / 100, t % 100, TORCH / 100, TORCH % 100);
        }
        Ok(Shim {
            begin: *lib.get(b"fv_graph_begin\0")?,
            end: *lib.get(b"fv_graph_end\0")?,
            replay: *lib.get(b"fv_graph_replay\0")?,
            free: *lib.get(b"fv_graph_free\0")?,
            stream: *lib.get(b"fv_current_stream\0")?,
            limit: lib.get::<MemLimit>(b"fv_memory_limit\0").ok().map(|f| *f),
            memory: match (lib.get::<MemStats>(b"fv_memory_stats\0"), lib.get::<MemReset>(b"fv_memory_reset_peak\0")) {
                (Ok(s), Ok(r)) => Some((*s, *r)),
                _ => None,
            },
            _lib: lib,
        })
    }
}

/// Whether work on `device` can be captured.
pub fn available(device: Device) -> bool {
    device.is_cuda() && shim().is_some()
}

/// libtorch's caching-allocator byte counters on CUDA device `ordinal`: allocated current and
/// peak, reserved current and peak (`torch.cuda.memory_allocated` and friends). `None` without
/// the shim (or one built before these counters), e.g. on CPU-only machines.
pub(crate) fn allocator_stats(ordinal: usize) -> Option<[i64; 4]> {
    let (stats, _) = shim()?.memory?;
    let (mut out, mut err) = ([0i64; 4], [0 as c_char; 256]);
    // SAFETY: the shim's signature; `out` holds the four values it writes.
    let rc = unsafe { stats(ordinal as c_int, out.as_mut_ptr(), err.as_mut_ptr(), err.len()) };
    (rc == 0).then_some(out)
}

/// Starts the allocator's peaks on CUDA device `ordinal` again from its current use (first
/// emptying its cache when `empty_cache`); whether it could.
pub(crate) fn reset_allocator_peak(ordinal: usize, empty_cache: bool) -> bool {
    let Some((_, reset)) = shim().and_then(|s| s.memory) else { return false };
    let mut err = [0 as c_char; 256];
    // SAFETY: the shim's signature.
    unsafe { reset(ordinal as c_int, c_int::from(empty_cache), err.as_mut_ptr(), err.len()) == 0 }
}

/// Caps the caching allocator on CUDA device `ordinal` at `fraction` of its memory; whether it
/// could (the shim may be absent, or older than this call).
pub(crate) fn limit_allocator(ordinal: usize, fraction: f64) -> bool {
    let Some(limit) = shim().and_then(|s| s.limit) else { return false };
    let mut err = [0 as c_char; 256];
    // SAFETY: the shim's signature.
    unsafe { limit(ordinal as c_int, fraction, err.as_mut_ptr(), err.len()) == 0 }
}

/// The raw stream a capture on this thread is recording, for kernels launched outside
/// libtorch (none when no capture runs: they go to the default stream).
pub(crate) fn capture_stream() -> Option<*mut c_void> {
    let s = CAPTURING.with(Cell::get);
    (!s.is_null()).then_some(s)
}

/// A captured CUDA graph; its memory (the tensors made during capture) stays with it.
pub struct CudaGraph {
    raw: NonNull<c_void>,
    shim: &'static Shim,
}

// SAFETY: the graph is an opaque heap handle owned by this value; the shim's calls on it (replay,
// free) do not depend on the thread that captured it (replays run on the calling thread's
// current stream), so it may be used and dropped on another thread. It is not `Sync`.
unsafe impl Send for CudaGraph {}

fn message(buf: &[c_char]) -> String {
    // SAFETY: the shim always NUL-terminates within the buffer.
    unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned()
}

impl CudaGraph {
    /// Captures the GPU work `f` queues on CUDA device `ordinal` (nothing runs: the work is
    /// recorded). `share_pool_with`: an earlier graph whose memory pool this one shares, for
    /// graphs that are replayed one after another, never at once. `f` must not synchronise
    /// with the host (no reading values back, no copies from pageable memory).
    pub fn capture<R>(ordinal: usize, share_pool_with: Option<&CudaGraph>, f: impl FnOnce() -> R) -> Result<(Self, R)> {
        let shim = shim().ok_or_else(|| anyhow!("CUDA graphs are not available"))?;
        let mut err = [0 as c_char; 512];
        let mut raw = std::ptr::null_mut();
        let pool = share_pool_with.map_or(std::ptr::null_mut(), |g| g.raw.as_ptr());
        // SAFETY: the shim's documented signature; `raw` is written on success only.
        let rc = unsafe { (shim.begin)(ordinal as c_int, pool, &mut raw, err.as_mut_ptr(), err.len()) };
        if rc != 0 {
            bail!("starting a CUDA-graph capture: {}", message(&err));
        }
        let graph = Self { raw: NonNull::new(raw).ok_or_else(|| anyhow!("the shim gave no graph"))?, shim };
        // SAFETY: as above; the current stream is the capture stream the shim just set.
        CAPTURING.with(|c| c.set(unsafe { (shim.stream)(ordinal as c_int) }));
        let out = catch_unwind(AssertUnwindSafe(f));
        CAPTURING.with(|c| c.set(std::ptr::null_mut()));
        // SAFETY: ends the capture begun above (also after a panic, which leaves it unusable).
        let rc = unsafe { (shim.end)(graph.raw.as_ptr(), err.as_mut_ptr(), err.len()) };
        let out = out.map_err(|p| anyhow!("capturing: {}", fastvideo_torch::panic_message(p.as_ref())))?;
        if rc != 0 {
            bail!("ending a CUDA-graph capture: {}", message(&err));
        }
        Ok((graph, out))
    }

    /// Runs the captured work again on the default stream (asynchronously, like any launch).
    pub fn replay(&self) -> Result<()> {
        let mut err = [0 as c_char; 512];
        // SAFETY: a graph whose capture ended (`capture` returns only those).
        let rc = unsafe { (self.shim.replay)(self.raw.as_ptr(), err.as_mut_ptr(), err.len()) };
        if rc != 0 {
            bail!("replaying a CUDA graph: {}", message(&err));
        }
        Ok(())
    }
}

impl Drop for CudaGraph {
    fn drop(&mut self) {
        // SAFETY: the handle came from `begin` and is freed once.
        unsafe { (self.shim.free)(self.raw.as_ptr()) }
    }
}
