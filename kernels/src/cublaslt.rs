//! The few cuBLASLt entry points [`crate::linear_gelu`] needs, resolved in the copy of the
//! library that libtorch has loaded, so they run with the same version as libtorch's GEMMs.
//!
//! cudarc's own loader is not used for the calls (only its type declarations): it tries the
//! unversioned `libcublasLt.so` first, which on a machine with a CUDA toolkit on the library
//! path is another copy, possibly of another version (the H200 machine has one).

use std::ffi::c_void;
use std::os::raw::c_int;
use std::sync::OnceLock;

use anyhow::{anyhow, bail, Result};
use cudarc::cublaslt::sys::{
    cublasComputeType_t, cublasLtHandle_t, cublasLtMatmulAlgo_t, cublasLtMatmulDescAttributes_t, cublasLtMatmulDesc_t,
    cublasLtMatmulHeuristicResult_t, cublasLtMatmulPreferenceAttributes_t, cublasLtMatmulPreference_t,
    cublasLtMatrixLayout_t, cublasStatus_t, cudaDataType, cudaStream_t,
};
use libloading::os::unix::{Library, Symbol, RTLD_NOW};

/// glibc's and musl's `RTLD_NOLOAD` (libloading does not export it): open only what is loaded.
const RTLD_NOLOAD: c_int = 4;
/// libtorch's cuBLASLt, by soname: CUDA 13 wheels, then CUDA 12 ones (the entry points below
/// have the same signatures in both).
const SONAMES: [&str; 2] = ["libcublasLt.so.13", "libcublasLt.so.12"];

type Status = cublasStatus_t;

/// The entry points, typed as cudarc declares them.
pub struct Api {
    _lib: Library,
    pub create: unsafe extern "C" fn(*mut cublasLtHandle_t) -> Status,
    pub desc_create: unsafe extern "C" fn(*mut cublasLtMatmulDesc_t, cublasComputeType_t, cudaDataType) -> Status,
    pub desc_set:
        unsafe extern "C" fn(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t, *const c_void, usize) -> Status,
    pub desc_destroy: unsafe extern "C" fn(cublasLtMatmulDesc_t) -> Status,
    pub layout_create: unsafe extern "C" fn(*mut cublasLtMatrixLayout_t, cudaDataType, u64, u64, i64) -> Status,
    pub layout_destroy: unsafe extern "C" fn(cublasLtMatrixLayout_t) -> Status,
    pub pref_create: unsafe extern "C" fn(*mut cublasLtMatmulPreference_t) -> Status,
    pub pref_set: unsafe extern "C" fn(
        cublasLtMatmulPreference_t,
        cublasLtMatmulPreferenceAttributes_t,
        *const c_void,
        usize,
    ) -> Status,
    pub pref_destroy: unsafe extern "C" fn(cublasLtMatmulPreference_t) -> Status,
    #[allow(clippy::type_complexity)]
    pub heuristic: unsafe extern "C" fn(
        cublasLtHandle_t,
        cublasLtMatmulDesc_t,
        cublasLtMatrixLayout_t,
        cublasLtMatrixLayout_t,
        cublasLtMatrixLayout_t,
        cublasLtMatrixLayout_t,
        cublasLtMatmulPreference_t,
        c_int,
        *mut cublasLtMatmulHeuristicResult_t,
        *mut c_int,
    ) -> Status,
    #[allow(clippy::type_complexity)]
    pub matmul: unsafe extern "C" fn(
        cublasLtHandle_t,
        cublasLtMatmulDesc_t,
        *const c_void,
        *const c_void,
        cublasLtMatrixLayout_t,
        *const c_void,
        cublasLtMatrixLayout_t,
        *const c_void,
        *const c_void,
        cublasLtMatrixLayout_t,
        *mut c_void,
        cublasLtMatrixLayout_t,
        *const cublasLtMatmulAlgo_t,
        *mut c_void,
        usize,
        cudaStream_t,
    ) -> Status,
}

/// The API from libtorch's loaded cuBLASLt, or why not (resolved once per process).
pub fn api() -> Result<&'static Api, String> {
    static API: OnceLock<Result<Api, String>> = OnceLock::new();
    API.get_or_init(|| load().map_err(|e| format!("{e:#}"))).as_ref().map_err(Clone::clone)
}

fn load() -> Result<Api> {
    // SAFETY: RTLD_NOLOAD only returns a library already loaded (by libtorch); nothing new runs.
    let lib = SONAMES
        .iter()
        .find_map(|name| unsafe { Library::open(Some(name), RTLD_NOW | RTLD_NOLOAD) }.ok())
        .ok_or_else(|| anyhow!("libtorch has not loaded cuBLASLt ({})", SONAMES.join(" or ")))?;
    /// A symbol as the function type `T`.
    fn get<T: Copy>(lib: &Library, name: &str) -> Result<T> {
        // SAFETY: each `T` below is the signature cuBLASLt's header (as cudarc transcribes it)
        // declares for `name`; the library outlives the pointers (kept in the same struct,
        // never unloaded).
        let sym: Symbol<T> = unsafe { lib.get(name.as_bytes()) }.map_err(|e| anyhow!("cuBLASLt `{name}`: {e}"))?;
        Ok(*sym)
    }
    Ok(Api {
        create: get(&lib, "cublasLtCreate\0")?,
        desc_create: get(&lib, "cublasLtMatmulDescCreate\0")?,
        desc_set: get(&lib, "cublasLtMatmulDescSetAttribute\0")?,
        desc_destroy: get(&lib, "cublasLtMatmulDescDestroy\0")?,
        layout_create: get(&lib, "cublasLtMatrixLayoutCreate\0")?,
        layout_destroy: get(&lib, "cublasLtMatrixLayoutDestroy\0")?,
        pref_create: get(&lib, "cublasLtMatmulPreferenceCreate\0")?,
        pref_set: get(&lib, "cublasLtMatmulPreferenceSetAttribute\0")?,
        pref_destroy: get(&lib, "cublasLtMatmulPreferenceDestroy\0")?,
        heuristic: get(&lib, "cublasLtMatmulAlgoGetHeuristic\0")?,
        matmul: get(&lib, "cublasLtMatmul\0")?,
        _lib: lib,
    })
}

/// A cuBLASLt status as a result, naming the call.
pub fn check(status: Status, what: &str) -> Result<()> {
    if status == cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        bail!("{what}: {status:?}")
    }
}
