//! Fused CUDA kernels for the model families, each beside its tch fallback.
//!
//! The kernels are CUDA C in `kernels/cuda/`, compiled once per device at run time with NVRTC and
//! launched through `cudarc` on the legacy default stream, the stream libtorch's own kernels use,
//! so they interleave with tch ops in order and need no synchronisation. `cudarc` loads the CUDA
//! driver and NVRTC dynamically: builds and CPU runs never need CUDA, and a CPU tensor never
//! reaches [`cuda`]. Every public op takes the kernel path only when its inputs fit (a CUDA device
//! whose kernels compiled, supported dtypes, shapes and alignment) and otherwise runs the tch
//! fallback, which computes the same function; `parity` tests hold the two together.

#![deny(missing_docs)]

pub mod attention8;
mod cublaslt;
pub mod cuda;
pub mod fp8;
pub mod ggml;
pub mod graph;
pub mod head_rope;
pub mod linear_gelu;
mod norm;
pub mod paged_decode;
mod rope;
pub mod swiglu;
pub mod transfer;

pub use linear_gelu::linear_gelu_tanh;
pub use norm::{
    gated_residual, layer_norm_modulate, residual_layer_norm_modulate, residual_rms_norm_modulate, rms_norm_modulate,
    LayerNormSpec, RmsNormSpec,
};
pub use rope::{rms_norm_rope, rms_norm_rope_split};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

static DISABLED: AtomicBool = AtomicBool::new(false);
static FROM_ENV: Once = Once::new();

/// `FASTVIDEO_NO_KERNELS` read once, so the per-op check is one atomic load.
fn init_from_env() {
    FROM_ENV.call_once(|| {
        if std::env::var_os("FASTVIDEO_NO_KERNELS").is_some() {
            DISABLED.store(true, Ordering::Relaxed);
        }
    });
}

/// Turns the fused kernels off (or back on) for the whole process: every op then runs its tch
/// fallback. For benchmarks and for ruling the kernels out when chasing a numerical difference.
pub fn set_enabled(on: bool) {
    init_from_env();
    DISABLED.store(!on, Ordering::Relaxed);
}

/// Whether fused kernels may run (they still need a CUDA tensor and a supported shape).
pub fn enabled() -> bool {
    init_from_env();
    !DISABLED.load(Ordering::Relaxed)
}

/// Tests share libtorch's global random generator: each test that seeds it holds this lock for
/// as long as it draws, so tests on parallel threads cannot interleave their draws (which made a
/// borderline assertion depend on scheduling).
#[cfg(test)]
pub(crate) fn seeded(seed: i64) -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    tch::manual_seed(seed);
    guard
}
