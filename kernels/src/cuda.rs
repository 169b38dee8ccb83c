//! The CUDA side: one compiled module per device, built on first use.
//!
//! Nothing here runs for CPU tensors. For a CUDA tensor, [`for_tensor`] compiles
//! `kernels/cuda/*.cu` with NVRTC for the device's compute capability (≈0.2 s, once per machine:
//! the PTX is cached on disk, see [`ptx_cache_path`]) and loads it into the primary context, which libtorch's CUDA runtime shares. If
//! NVRTC or the driver cannot be loaded, or compilation fails, it logs one warning and every op
//! keeps its tch fallback.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use anyhow::{anyhow, Result};
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;
use tch::{Device, Tensor};

const SOURCE: &str = concat!(
    include_str!("../cuda/norms.cu"),
    include_str!("../cuda/quant.cu"),
    include_str!("../cuda/paged_decode.cu"),
    include_str!("../cuda/ggml.cu")
);
const FUNCTIONS: &[&str] = &[
    "norm_modulate_f32",
    "norm_modulate_bf16",
    "norm_modulate_f16",
    "rms_rope_f32",
    "rms_rope_bf16",
    "rms_rope_f16",
    "norm_modulate_f32_wide",
    "norm_modulate_bf16_wide",
    "norm_modulate_f16_wide",
    "rms_modulate_f32",
    "rms_modulate_bf16",
    "rms_modulate_f16",
    "rms_modulate_f32_wide",
    "rms_modulate_bf16_wide",
    "rms_modulate_f16_wide",
    "rms_rope_split_f32",
    "rms_rope_split_bf16",
    "rms_rope_split_f16",
    "rms_rope_f32_wide",
    "rms_rope_bf16_wide",
    "rms_rope_f16_wide",
    "head_rms_rope_f32",
    "head_rms_rope_bf16",
    "head_rms_rope_f16",
    "silu_mul_f32",
    "silu_mul_bf16",
    "silu_mul_f16",
    "quantize_fp8_f32",
    "quantize_fp8_bf16",
    "quantize_fp8_f16",
    "gelu_quantize_fp8_f32",
    "gelu_quantize_fp8_bf16",
    "gelu_quantize_fp8_f16",
    "paged_decode_bf16_d128",
    "paged_decode_f16_d128",
    "paged_decode_bf16_d64",
    "paged_decode_f16_d64",
    "ggml_q8_0_f32",
    "ggml_q8_0_bf16",
    "ggml_q8_0_f16",
    "ggml_q4_0_f32",
    "ggml_q4_0_bf16",
    "ggml_q4_0_f16",
    "ggml_q4_1_f32",
    "ggml_q4_1_bf16",
    "ggml_q4_1_f16",
    "ggml_q5_0_f32",
    "ggml_q5_0_bf16",
    "ggml_q5_0_f16",
    "ggml_q5_1_f32",
    "ggml_q5_1_bf16",
    "ggml_q5_1_f16",
    "ggml_q4_k_f32",
    "ggml_q4_k_bf16",
    "ggml_q4_k_f16",
    "ggml_q5_k_f32",
    "ggml_q5_k_bf16",
    "ggml_q5_k_f16",
    "ggml_q6_k_f32",
    "ggml_q6_k_bf16",
    "ggml_q6_k_f16",
];

/// A kernel argument, as the kernel's C signature declares it.
#[derive(Clone, Copy, Debug)]
pub enum Arg {
    /// A device pointer (0 = null).
    Ptr(u64),
    /// A C `int64_t`.
    I64(i64),
    /// A C `int`.
    I32(i32),
    /// A C `float`.
    F32(f32),
}

/// Kernels that need Hopper's `sm_90a` features (wgmma), compiled as a module of their own and
/// only on compute capability 9.0.
const SM90_SOURCE: &str = concat!(include_str!("../cuda/attention8.cu"), include_str!("../cuda/attention8_quant.cu"));
const SM90_FUNCTIONS: &[&str] = &[
    "quant_int8_rows",
    "kv_stats",
    "quant_v_fp8t",
    "quant_v_16t",
    "attention_int8_fp8_sm90",
    "attention_int8_f16_sm90",
    "attention_int8_bf16_sm90",
];
/// Dynamic shared memory of the 8-bit attention kernels (their `SMEM_BYTES`). Room for up to 6
/// key/value stages of the e4m3 kernel (5 as shipped; its `STAGES` switch may ask for 6), which
/// also holds the 16-bit P·V kernels' 4 stages of twice the size: one CTA per SM either way, which the
/// registers already decide.
pub const ATTENTION8_SMEM: u32 = 16 * 1024 + 6 * 32 * 1024 + 1024 + 8 * 13;

/// The compiled kernels of one device.
pub struct DeviceKernels {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    functions: HashMap<&'static str, CudaFunction>,
    /// Compute capability, e.g. (9, 0).
    pub capability: (i32, i32),
    /// Whether the `sm_90a` module (8-bit attention) compiled and loaded.
    pub sm90: bool,
}

static DEVICES: OnceLock<Mutex<HashMap<usize, Option<Arc<DeviceKernels>>>>> = OnceLock::new();

/// The kernels for the tensor's device, or `None` (a CPU tensor, kernels disabled, or no usable
/// CUDA toolchain), in which case the caller runs its fallback.
pub fn for_tensor(t: &Tensor) -> Option<Arc<DeviceKernels>> {
    let Device::Cuda(ordinal) = t.device() else {
        return None;
    };
    if !crate::enabled() {
        return None;
    }
    device(ordinal)
}

/// The kernels of CUDA device `ordinal`, compiling them on first use.
pub fn device(ordinal: usize) -> Option<Arc<DeviceKernels>> {
    let map = DEVICES.get_or_init(|| Mutex::new(HashMap::new()));
    let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
    map.entry(ordinal)
        .or_insert_with(|| {
            let t0 = std::time::Instant::now();
            match build(ordinal) {
                Ok(k) => {
                    tracing::info!(ordinal, capability = ?k.capability, ms = t0.elapsed().as_millis() as u64, "fused CUDA kernels compiled");
                    Some(Arc::new(k))
                }
                Err(e) => {
                    tracing::warn!(ordinal, error = %format!("{e:#}"), "fused CUDA kernels unavailable; using tch ops");
                    None
                }
            }
        })
        .clone()
}

/// Whether a row of `d` elements fits the kernels' layout (8-value groups, ≤ 4 per thread).
pub fn row_fits(d: i64) -> bool {
    d > 0 && d % 8 == 0 && d <= 8 * 1024 * 4
}

/// Whether the tensor's first element sits on a 16-byte boundary (the kernels' vector accesses).
pub fn aligned(t: &Tensor) -> bool {
    (t.data_ptr() as usize).is_multiple_of(16)
}

impl DeviceKernels {
    /// Launches `name` with one block per row (`rows` × `planes` blocks) and enough threads for a
    /// row of `d` elements in 8-value groups.
    pub fn launch_rows(&self, name: &str, rows: i64, planes: u32, d: i64, args: &[Arg]) -> Result<()> {
        let groups = (d / 8) as u32;
        let threads = groups.div_ceil(32).clamp(1, 32) * 32;
        let cfg = LaunchConfig { grid_dim: (rows as u32, planes, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 };
        // Rows wider than one chunk of 8 per thread take the kernel's `_wide` build where it has
        // one (the norm kernels: norms.cu); only those rows pay for the name.
        if groups > 1024 {
            let wide = format!("{name}_wide");
            if self.functions.contains_key(wide.as_str()) {
                return self.launch(&wide, cfg, args);
            }
        }
        self.launch(name, cfg, args)
    }

    /// Makes this device's (primary) context current on the calling thread, for libraries that
    /// run on the current context (cuBLASLt).
    pub fn bind(&self) -> Result<()> {
        self.ctx.bind_to_thread().map_err(|e| anyhow!("binding the CUDA context: {e}"))
    }

    /// The threads per block `name` declares (its `__launch_bounds__`), for kernels whose
    /// layout of warps is their own business (the 8-bit attention's producer warpgroup).
    pub fn block_threads(&self, name: &str) -> Result<u32> {
        let f = self.functions.get(name).ok_or_else(|| anyhow!("no kernel `{name}`"))?;
        let n = f.max_threads_per_block().map_err(|e| anyhow!("kernel `{name}`: {e}"))?;
        Ok(n as u32)
    }

    /// Launches `name` with an explicit grid, block and dynamic shared memory.
    pub fn launch(&self, name: &str, cfg: LaunchConfig, args: &[Arg]) -> Result<()> {
        let f = self.functions.get(name).ok_or_else(|| anyhow!("no kernel `{name}`"))?;
        // During a CUDA-graph capture, onto the stream being recorded (libtorch's current one).
        let captured = crate::graph::capture_stream().map(|raw| {
            // SAFETY: the capture stream belongs to libtorch's context (the primary one, ours
            // too) and outlives the capture this launch is part of.
            unsafe { self.ctx.wrap_borrowed_stream(raw as cudarc::driver::sys::CUstream) }
        });
        let mut b = captured.as_ref().unwrap_or(&self.stream).launch_builder(f);
        for a in args {
            match a {
                Arg::Ptr(p) => b.arg(p),
                Arg::I64(v) => b.arg(v),
                Arg::I32(v) => b.arg(v),
                Arg::F32(v) => b.arg(v),
            };
        }
        // SAFETY: the callers check every pointer's tensor shape, dtype, device and alignment
        // against the kernel's contract before building `args`.
        unsafe { b.launch(cfg) }.map_err(|e| {
            tracing::warn!(kernel = name, error = %e, "kernel launch failed; using tch ops");
            anyhow!("launching {name}: {e}")
        })?;
        Ok(())
    }
}

fn build(ordinal: usize) -> Result<DeviceKernels> {
    // cudarc panics when a library cannot be loaded; turn that into an error.
    let ctx = std::panic::catch_unwind(|| CudaContext::new(ordinal))
        .map_err(|_| anyhow!("the CUDA driver library could not be loaded"))?
        .map_err(|e| anyhow!("CUDA context for device {ordinal}: {e}"))?;
    let capability = ctx.compute_capability().map_err(|e| anyhow!("compute capability: {e}"))?;
    let arch: &'static str = Box::leak(format!("compute_{}{}", capability.0, capability.1).into_boxed_str());
    let cached = ptx_cache_path(SOURCE, arch);
    let module = match cached.as_ref().and_then(|p| std::fs::read_to_string(p).ok()) {
        Some(src) => match ctx.load_module(Ptx::from_src(src)) {
            Ok(m) => m,
            Err(e) => {
                tracing::debug!(error = %e, "cached kernel PTX did not load; recompiling");
                compile_and_load(&ctx, SOURCE, arch, cached.as_deref())?
            }
        },
        None => compile_and_load(&ctx, SOURCE, arch, cached.as_deref())?,
    };
    let mut functions = HashMap::new();
    for &name in FUNCTIONS {
        functions.insert(name, module.load_function(name).map_err(|e| anyhow!("kernel `{name}`: {e}"))?);
    }
    let sm90 = capability == (9, 0)
        && match load_sm90(&ctx) {
            Ok(fs) => {
                functions.extend(fs);
                true
            }
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "8-bit attention kernels unavailable; using SDPA");
                false
            }
        };
    // The legacy default stream: libtorch runs its kernels there unless a stream is set, so ours
    // are ordered with them.
    let stream = ctx.default_stream();
    Ok(DeviceKernels { ctx, stream, functions, capability, sm90 })
}

/// The `sm_90a` module: compiled (or read from the PTX cache) and its functions set up.
fn load_sm90(ctx: &Arc<CudaContext>) -> Result<Vec<(&'static str, CudaFunction)>> {
    let arch = "compute_90a";
    // A tuning experiment's switches (`attention8.cu`'s header), e.g. "POLY_NUM=4,PINGPONG=1".
    let defines: String = std::env::var("FASTVIDEO_ATTN8_DEFINES")
        .unwrap_or_default()
        .split(',')
        .filter_map(|d| d.split_once('='))
        .map(|(k, v)| format!("#define {} {}\n", k.trim(), v.trim()))
        .collect();
    let source = format!("{defines}{SM90_SOURCE}");
    let cached = ptx_cache_path(&source, arch);
    let module = match cached.as_ref().and_then(|p| std::fs::read_to_string(p).ok()) {
        Some(src) => match ctx.load_module(Ptx::from_src(src)) {
            Ok(m) => m,
            Err(_) => compile_and_load(ctx, &source, arch, cached.as_deref())?,
        },
        None => compile_and_load(ctx, &source, arch, cached.as_deref())?,
    };
    let mut out = Vec::new();
    for &name in SM90_FUNCTIONS {
        out.push((name, module.load_function(name).map_err(|e| anyhow!("kernel `{name}`: {e}"))?));
    }
    for kernel in ["attention_int8_fp8_sm90", "attention_int8_f16_sm90", "attention_int8_bf16_sm90"] {
        let attn = &out.iter().find(|(n, _)| *n == kernel).expect("listed above").1;
        attn.set_attribute(
            cudarc::driver::sys::CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            ATTENTION8_SMEM as i32,
        )
        .map_err(|e| anyhow!("shared memory for {kernel}: {e}"))?;
    }
    Ok(out)
}

fn compile_and_load(
    ctx: &Arc<CudaContext>,
    source: &str,
    arch: &'static str,
    cache: Option<&Path>,
) -> Result<Arc<CudaModule>> {
    preload_nvrtc();
    let opts = cudarc::nvrtc::CompileOptions { arch: Some(arch), use_fast_math: Some(false), ..Default::default() };
    let ptx = std::panic::catch_unwind(|| cudarc::nvrtc::compile_ptx_with_opts(source, opts))
        .map_err(|_| anyhow!("NVRTC (libnvrtc.so) could not be loaded"))?
        .map_err(|e| anyhow!("NVRTC compile of kernels/cuda/ for {arch}: {e}"))?;
    if let Some(path) = cache {
        // Written whole to a temporary name, then renamed: a reader never sees half a file.
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let written =
            path.parent().map_or(Ok(()), std::fs::create_dir_all).and_then(|_| std::fs::write(&tmp, ptx.to_src()));
        if let Err(e) = written.and_then(|_| std::fs::rename(&tmp, path)) {
            tracing::debug!(path = %path.display(), error = %e, "kernel PTX not cached");
            let _ = std::fs::remove_file(&tmp);
        }
    }
    ctx.load_module(ptx).map_err(|e| anyhow!("loading the kernel module: {e}"))
}

/// Where the compiled PTX of this source for `arch` is kept between processes (NVRTC takes
/// ≈0.2 s per process otherwise): `$FASTVIDEO_CACHE_DIR`, else `$XDG_CACHE_HOME/fastvideo`, else
/// `~/.cache/fastvideo`. The name carries a hash of the source and the arch, so an edited kernel
/// or another GPU never reads a stale file.
fn ptx_cache_path(source: &str, arch: &str) -> Option<PathBuf> {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    let dir = env("FASTVIDEO_CACHE_DIR")
        .or_else(|| env("XDG_CACHE_HOME").map(|d| d.join("fastvideo")))
        .or_else(|| env("HOME").map(|d| d.join(".cache/fastvideo")))?;
    Some(dir.join(ptx_file_name(source, arch)))
}

fn ptx_file_name(source: &str, arch: &str) -> String {
    let mut h = blake3::Hasher::new();
    h.update(source.as_bytes()).update(b"\0").update(arch.as_bytes());
    format!("kernels-{}.ptx", &h.finalize().to_hex()[..16])
}

/// PyTorch's wheels ship NVRTC beside libtorch (`site-packages/nvidia/cu13/lib`); load it from
/// there so cudarc's search by soname finds it without `LD_LIBRARY_PATH`.
fn preload_nvrtc() {
    let Some(torch_lib) = fastvideo_torch::init().libtorch_dir.clone() else {
        return;
    };
    let site = torch_lib.parent().and_then(|p| p.parent()).map(PathBuf::from);
    let Some(site) = site else { return };
    for dir in ["nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"] {
        let Ok(entries) = std::fs::read_dir(site.join(dir)) else { continue };
        // NVRTC opens its builtins library by soname at compile time: load both.
        for e in entries.flatten() {
            if !e.file_name().to_string_lossy().starts_with("libnvrtc") {
                continue;
            }
            // SAFETY: loading NVRTC runs no code beyond its initialisers; the handle is kept for
            // the life of the process.
            let lib = unsafe {
                libloading::os::unix::Library::open(
                    Some(e.path()),
                    libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_GLOBAL,
                )
            };
            if let Ok(lib) = lib {
                tracing::debug!(path = %e.path().display(), "preloaded");
                std::mem::forget(lib);
            }
        }
    }
}

/// The ordinal of `device` when it is a CUDA device.
pub fn ordinal(device: tch::Device) -> Option<usize> {
    match device {
        tch::Device::Cuda(i) => Some(i),
        _ => None,
    }
}

/// Bytes in use on CUDA device `ordinal` (the driver's view: total minus free, so it includes
/// libtorch's cached blocks and other processes), or `None` when the kernels' context is not up.
pub fn memory_used(ordinal: usize) -> Option<u64> {
    memory_info(ordinal).map(|(free, total)| total - free)
}

/// Bytes free on CUDA device `ordinal` (the driver's view), or `None` when the kernels' context
/// is not up.
pub fn memory_free(ordinal: usize) -> Option<u64> {
    memory_info(ordinal).map(|(free, _)| free)
}

/// libtorch's caching allocator on one device, in bytes (what `torch.cuda.max_memory_allocated`
/// and `max_memory_reserved` report): `allocated` is live tensors, `reserved` what the allocator
/// holds from the driver (allocated plus its cache).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocatorMemory {
    /// Bytes held by live tensors now.
    pub allocated: u64,
    /// The most `allocated` has been since the last peak reset.
    pub peak_allocated: u64,
    /// Bytes the allocator holds from the driver now, its cache included.
    pub reserved: u64,
    /// The most `reserved` has been since the last peak reset.
    pub peak_reserved: u64,
}

/// The allocator's counters on CUDA device `ordinal`, or `None` where they cannot be read (no
/// CUDA-graph shim beside the binary: it is the C++ side that reaches them).
pub fn allocator_memory(ordinal: usize) -> Option<AllocatorMemory> {
    let [a, pa, r, pr] = crate::graph::allocator_stats(ordinal)?;
    let b = |v: i64| v.max(0) as u64;
    Some(AllocatorMemory { allocated: b(a), peak_allocated: b(pa), reserved: b(r), peak_reserved: b(pr) })
}

/// Resets the allocator's peaks on CUDA device `ordinal` to its current use, so the next
/// [`allocator_memory`] gives the peak of what ran in between; `empty_cache` first gives the
/// cache's unused blocks back (so the reserved peak is the work's, not an earlier phase's);
/// whether it could.
pub fn reset_allocator_peak(ordinal: usize, empty_cache: bool) -> bool {
    crate::graph::reset_allocator_peak(ordinal, empty_cache)
}

/// Caps libtorch's allocator on CUDA device `ordinal` at `bytes` (an allocation past it fails as
/// out of memory once the cache is freed); whether it could: it needs the CUDA-graph shim beside
/// the binary and the kernels' context.
pub fn limit_allocator(ordinal: usize, bytes: u64) -> bool {
    let Some((_, total)) = memory_info(ordinal) else { return false };
    crate::graph::limit_allocator(ordinal, (bytes as f64 / total as f64).min(1.0))
}

fn memory_info(ordinal: usize) -> Option<(u64, u64)> {
    let k = device(ordinal)?;
    k.ctx.bind_to_thread().ok()?;
    let (free, total) = cudarc::driver::result::mem_get_info().ok()?;
    Some((free as u64, total as u64))
}

#[cfg(test)]
mod tests {
    use super::ptx_file_name;

    #[test]
    fn cached_ptx_names_change_with_the_source_and_the_arch() {
        let a = ptx_file_name("__global__ void k() {}", "compute_90");
        assert_eq!(a, ptx_file_name("__global__ void k() {}", "compute_90"));
        assert_ne!(a, ptx_file_name("__global__ void k() { }", "compute_90"));
        assert_ne!(a, ptx_file_name("__global__ void k() {}", "compute_80"));
        assert!(a.starts_with("kernels-") && a.ends_with(".ptx"));
    }
}
