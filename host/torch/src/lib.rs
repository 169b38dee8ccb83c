//! libtorch runtime glue.
//!
//! Binaries link only the CPU part of libtorch (fetched by `host/scripts/bootstrap.sh`). On a
//! machine with a full CUDA build of the *same* libtorch (PyTorch 2.11.0+cu130), loading
//! `libtorch_cuda.so` with `RTLD_GLOBAL` before the first tensor op registers the CUDA backend, so
//! one binary serves CPU-only developer machines and GPU machines alike. [`init`] does that once.

#![deny(missing_docs)]

mod dtype;
pub mod parity;
mod precision;
pub mod weights;

pub use dtype::{kind_name, DtypeChoice};
pub use precision::{beyond_preset, lossy_paths, Int8Attention, Numerics, Precision};

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{bail, Result};
use tch::Device;

/// What [`init`] found.
#[derive(Debug, Clone)]
pub struct Runtime {
    /// Folder of the `libtorch_cpu.so` this process loaded.
    pub libtorch_dir: Option<PathBuf>,
    /// Whether `libtorch_cuda.so` was loaded from beside it.
    pub cuda_loaded: bool,
    /// CUDA devices libtorch reports after loading.
    pub cuda_devices: usize,
}

static RUNTIME: OnceLock<Runtime> = OnceLock::new();

/// Loads the CUDA backend when the process's libtorch folder has one. Safe to call many times.
pub fn init() -> &'static Runtime {
    RUNTIME.get_or_init(|| {
        let libtorch_dir = loaded_libtorch_dir();
        let mut cuda_loaded = false;
        if std::env::var_os("FASTVIDEO_NO_CUDA").is_none() {
            if let Some(dir) = &libtorch_dir {
                let cuda = dir.join("libtorch_cuda.so");
                if cuda.exists() {
                    cuda_loaded = load_global(&cuda);
                }
            }
        }
        let cuda_devices = if cuda_loaded { tch::Cuda::device_count() as usize } else { 0 };
        let rt = Runtime { libtorch_dir, cuda_loaded, cuda_devices };
        tracing::debug!(?rt, "libtorch runtime");
        rt
    })
}

/// Parses a device name (`cpu`, `cuda`, `cuda:N`, `auto`) after [`init`].
pub fn device(name: &str) -> Result<Device> {
    let rt = init();
    let dev = match name {
        "auto" => {
            if rt.cuda_devices > 0 {
                Device::Cuda(0)
            } else {
                Device::Cpu
            }
        }
        "cpu" => Device::Cpu,
        "cuda" => Device::Cuda(0),
        other => match other.strip_prefix("cuda:").map(str::parse::<usize>) {
            Some(Ok(i)) => Device::Cuda(i),
            _ => bail!("--device: unknown device `{other}` (use auto, cpu, cuda or cuda:N)"),
        },
    };
    if let Device::Cuda(i) = dev {
        if i >= rt.cuda_devices {
            bail!(
                "--device: {name} requested but {} CUDA device(s) are usable (libtorch at {}; \
                 a CUDA build of libtorch 2.11.0 must be on LD_LIBRARY_PATH)",
                rt.cuda_devices,
                rt.libtorch_dir.as_deref().map(Path::display).map(|d| d.to_string()).unwrap_or_else(|| "?".into())
            );
        }
    }
    Ok(dev)
}

fn load_global(path: &Path) -> bool {
    // SAFETY: loading a shared library runs its constructors; libtorch_cuda's register CUDA
    // kernels with the already-loaded libtorch_cpu of the same build, which is what we want. The
    // handle is leaked on purpose: the library must stay loaded for the life of the process.
    let lib = unsafe {
        libloading::os::unix::Library::open(
            Some(path),
            libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_GLOBAL,
        )
    };
    match lib {
        Ok(lib) => {
            std::mem::forget(lib);
            true
        }
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "could not load CUDA libtorch; using CPU");
            false
        }
    }
}

/// Finds the folder of the mapped `libtorch_cpu.so` through `/proc/self/maps`.
fn loaded_libtorch_dir() -> Option<PathBuf> {
    // Touch libtorch so it is certainly mapped (it is linked, but be explicit).
    let _ = tch::utils::has_mkl();
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.ends_with("/libtorch_cpu.so"))
        .and_then(|p| Path::new(p).parent().map(Path::to_path_buf))
}

/// The message of a caught panic: tch reports libtorch's errors (a CUDA out-of-memory, a shape
/// mismatch) as panics carrying libtorch's text, which callers that catch them pass on.
pub fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_linked_libtorch_and_parses_devices() {
        let rt = init();
        let dir = rt.libtorch_dir.as_ref().expect("libtorch_cpu.so is mapped");
        assert!(dir.join("libtorch_cpu.so").exists());
        assert_eq!(device("cpu").unwrap(), Device::Cpu);
        let err = device("tpu").unwrap_err().to_string();
        assert!(err.contains("unknown device `tpu`"), "{err}");
        if rt.cuda_devices == 0 {
            assert!(device("cuda:0").is_err());
            assert_eq!(device("auto").unwrap(), Device::Cpu);
        }
    }
}
