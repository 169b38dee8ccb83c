//! `gelu_tanh(x Wᵀ + b)` as one cuBLASLt GEMM whose epilogue adds the bias and applies the GELU,
//! so the FFN's widest activation (`[rows, 8960]` in Wan 1.3B) is written once instead of
//! written, read and written again by a separate GELU pass.
//!
//! Why not `torch._addmm_activation`, which does the same: tch 0.24's binding of it passes
//! `use_gelu` where the C++ function takes `beta`, so the call computes `relu(x Wᵀ + b)` whatever
//! is asked (the test below keeps an eye on that). This module calls cuBLASLt itself, loaded
//! dynamically by cudarc (the library libtorch has loaded already), on the stream libtorch's
//! kernels use; the matmul plan is chosen once per shape and kept.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use anyhow::{anyhow, bail, Result};
use cudarc::cublaslt::result as lt;
use cudarc::cublaslt::sys;
use tch::{Device, Kind, Tensor};

/// `gelu_tanh(x Wᵀ + b)` for `x` `[..., in]`, `weight` `[out, in]`, `bias` `[out]`: the fused
/// GEMM on a CUDA device in bf16/f16 with 16-byte aligned rows, else the two tch ops (the same
/// function; the fused one rounds once instead of twice).
pub fn linear_gelu_tanh(x: &Tensor, weight: &Tensor, bias: &Tensor) -> Tensor {
    if let Some(y) = try_fused(x, weight, bias) {
        return y;
    }
    let mut y = x.linear(weight, Some(bias));
    let _ = y.gelu_("tanh");
    y
}

static FUSED_CALLS: AtomicU64 = AtomicU64::new(0);

/// How many calls took the fused GEMM so far (tests check that it, not the fallback, ran).
pub fn fused_calls() -> u64 {
    FUSED_CALLS.load(Ordering::Relaxed)
}

/// `FASTVIDEO_NO_GELU_EPILOGUE` set: the two ops everywhere (for side-by-side measurements; the
/// other kernels stay on, unlike `FASTVIDEO_NO_KERNELS`).
fn switched_off() -> bool {
    static OFF: OnceLock<bool> = OnceLock::new();
    *OFF.get_or_init(|| std::env::var_os("FASTVIDEO_NO_GELU_EPILOGUE").is_some())
}

fn try_fused(x: &Tensor, weight: &Tensor, bias: &Tensor) -> Option<Tensor> {
    let Device::Cuda(ordinal) = x.device() else { return None };
    if switched_off() {
        return None;
    }
    let kind = x.kind();
    if !matches!(kind, Kind::BFloat16 | Kind::Half) || weight.kind() != kind || bias.kind() != kind {
        return None;
    }
    let (out, inp) = weight.size2().ok()?;
    let s = x.size();
    if s.last() != Some(&inp) || bias.size() != [out] || inp % 8 != 0 || out % 8 != 0 {
        return None;
    }
    if !weight.is_contiguous() || !bias.is_contiguous() || weight.device() != x.device() {
        return None;
    }
    let kernels = crate::cuda::for_tensor(x)?;
    let rows: i64 = s[..s.len() - 1].iter().product();
    if rows == 0 {
        return None;
    }
    let x2 = x.contiguous();
    if ![&x2, weight, bias].iter().all(|t| crate::cuda::aligned(t)) {
        return None;
    }
    let mut shape = s[..s.len() - 1].to_vec();
    shape.push(out);
    let y = Tensor::empty(shape.as_slice(), (kind, x.device()));
    let key = PlanKey { ordinal, half: kind == Kind::Half, rows, out, inp };
    {
        let st = state().lock().unwrap_or_else(|e| e.into_inner());
        if st.missing || st.refused.contains(&key) {
            return None;
        }
        // Setting up (a handle, the workspace, a plan) is kept out of CUDA-graph captures; a
        // shape first seen inside one is captured with the two ops.
        if crate::graph::capture_stream().is_some() && !st.plans.contains_key(&key) {
            return None;
        }
    }
    match run(&kernels, key, &x2, weight, bias, &y) {
        Ok(()) => {
            FUSED_CALLS.fetch_add(1, Ordering::Relaxed);
            Some(y)
        }
        Err(e) => {
            // One warning per shape, then the tch ops for it.
            tracing::warn!(rows, out, inp, error = %format!("{e:#}"), "cuBLASLt GELU epilogue failed; using tch ops");
            state().lock().unwrap_or_else(|e| e.into_inner()).refused.push(key);
            None
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
struct PlanKey {
    ordinal: usize,
    half: bool,
    rows: i64,
    out: i64,
    inp: i64,
}

/// A shape's descriptors and chosen algorithm. The bias pointer is an attribute of the
/// descriptor, set before each call under the state's lock.
struct Plan {
    desc: sys::cublasLtMatmulDesc_t,
    a: sys::cublasLtMatrixLayout_t,
    b: sys::cublasLtMatrixLayout_t,
    d: sys::cublasLtMatrixLayout_t,
    algo: sys::cublasLtMatmulAlgo_t,
}

struct Lt {
    handles: HashMap<usize, (sys::cublasLtHandle_t, Tensor)>,
    plans: HashMap<PlanKey, Plan>,
    refused: Vec<PlanKey>,
    /// cuBLASLt could not be loaded: never asked again.
    missing: bool,
}

// SAFETY: the raw cuBLASLt handles and descriptors are only used under the state's mutex.
unsafe impl Send for Lt {}

/// cuBLASLt's recommended workspace on Hopper.
const WORKSPACE: i64 = 32 << 20;

fn state() -> &'static Mutex<Lt> {
    static S: OnceLock<Mutex<Lt>> = OnceLock::new();
    S.get_or_init(|| {
        Mutex::new(Lt { handles: HashMap::new(), plans: HashMap::new(), refused: Vec::new(), missing: false })
    })
}

fn data_type(half: bool) -> sys::cudaDataType {
    if half {
        sys::cudaDataType::CUDA_R_16F
    } else {
        sys::cudaDataType::CUDA_R_16BF
    }
}

fn run(
    kernels: &crate::cuda::DeviceKernels,
    key: PlanKey,
    x: &Tensor,
    w: &Tensor,
    bias: &Tensor,
    y: &Tensor,
) -> Result<()> {
    let mut st = state().lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: a library probe; loading runs only its initialisers.
    if st.handles.is_empty() && !unsafe { sys::is_culib_present() } {
        st.missing = true;
        bail!("libcublasLt could not be loaded");
    }
    kernels.bind()?;
    let (handle, ws_ptr) = match st.handles.entry(key.ordinal) {
        Entry::Occupied(e) => (e.get().0, e.get().1.data_ptr()),
        Entry::Vacant(v) => {
            let h = lt::create_handle().map_err(|e| anyhow!("cublasLtCreate: {e}"))?;
            let ws = Tensor::empty([WORKSPACE], (Kind::Uint8, x.device()));
            let (h, ws) = v.insert((h, ws));
            (*h, ws.data_ptr())
        }
    };
    let plan = match st.plans.entry(key) {
        Entry::Occupied(e) => e.into_mut(),
        Entry::Vacant(v) => v.insert(make_plan(handle, key)?),
    };
    let bias_ptr = bias.data_ptr() as u64;
    let (alpha, beta) = (1f32, 0f32);
    let stream = crate::graph::capture_stream().unwrap_or(std::ptr::null_mut()) as sys::cudaStream_t;
    // SAFETY: the plan's descriptors live in the state (locked); shapes, dtypes, contiguity and
    // alignment of every pointer were checked against the plan's key by the caller; the
    // workspace is this device's, used in stream order.
    unsafe {
        lt::set_matmul_desc_attribute(
            plan.desc,
            sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_BIAS_POINTER,
            (&bias_ptr) as *const u64 as *const c_void,
            std::mem::size_of::<u64>(),
        )
        .map_err(|e| anyhow!("bias pointer: {e}"))?;
        // Column-major view: D (out × rows) = op(A = W stored in × out)ᵀ · B (x stored in × rows).
        lt::matmul(
            handle,
            plan.desc,
            (&alpha) as *const f32 as *const c_void,
            (&beta) as *const f32 as *const c_void,
            w.data_ptr(),
            plan.a,
            x.data_ptr(),
            plan.b,
            y.data_ptr(),
            plan.d,
            y.data_ptr(),
            plan.d,
            &plan.algo,
            ws_ptr,
            WORKSPACE as usize,
            stream,
        )
        .map_err(|e| anyhow!("cublasLtMatmul: {e}"))
    }
}

fn make_plan(handle: sys::cublasLtHandle_t, key: PlanKey) -> Result<Plan> {
    let t = data_type(key.half);
    let (m, n, k) = (key.out as u64, key.rows as u64, key.inp as u64);
    let err = |what: &'static str| move |e: lt::CublasError| anyhow!("{what}: {e}");
    let desc = lt::create_matmul_desc(sys::cublasComputeType_t::CUBLAS_COMPUTE_32F, sys::cudaDataType::CUDA_R_32F)
        .map_err(err("matmul descriptor"))?;
    let a = lt::create_matrix_layout(t, k, m, key.inp).map_err(err("layout of W"))?;
    let b = lt::create_matrix_layout(t, k, n, key.inp).map_err(err("layout of x"))?;
    let d = lt::create_matrix_layout(t, m, n, key.out).map_err(err("layout of the output"))?;
    let plan = Plan { desc, a, b, d, algo: unsafe { std::mem::zeroed() } };
    let set = |attr, v: u32| {
        // SAFETY: a live descriptor and a 4-byte attribute value.
        unsafe { lt::set_matmul_desc_attribute(desc, attr, (&v) as *const u32 as *const c_void, 4) }
    };
    use sys::cublasLtMatmulDescAttributes_t as A;
    set(A::CUBLASLT_MATMUL_DESC_TRANSA, 1).map_err(err("transpose of W"))?;
    set(A::CUBLASLT_MATMUL_DESC_TRANSB, 0).map_err(err("transpose of x"))?;
    set(A::CUBLASLT_MATMUL_DESC_EPILOGUE, sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_GELU_BIAS as u32)
        .map_err(err("GELU_BIAS epilogue"))?;
    let pref = lt::create_matmul_pref().map_err(err("preference"))?;
    let result = (|| {
        let ws = WORKSPACE as u64;
        // SAFETY: a live preference and correctly sized values.
        unsafe {
            use sys::cublasLtMatmulPreferenceAttributes_t as P;
            lt::set_matmul_pref_attribute(
                pref,
                P::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                (&ws) as *const u64 as *const c_void,
                8,
            )
            .map_err(err("workspace size"))?;
            // Every pointer is checked for 16-byte alignment before a call.
            for attr in [
                P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
            ] {
                let v = 16u32;
                lt::set_matmul_pref_attribute(pref, attr, (&v) as *const u32 as *const c_void, 4)
                    .map_err(err("alignment"))?;
            }
            let h = lt::get_matmul_algo_heuristic(handle, desc, a, b, d, d, pref).map_err(err("no algorithm"))?;
            Ok(h.algo)
        }
    })();
    // SAFETY: created above, not used after this.
    unsafe {
        let _ = lt::destroy_matmul_pref(pref);
    }
    match result {
        Ok(algo) => Ok(Plan { algo, ..plan }),
        Err(e) => {
            drop_plan(&plan);
            Err(e)
        }
    }
}

fn drop_plan(p: &Plan) {
    // SAFETY: created by make_plan and no longer referenced.
    unsafe {
        let _ = lt::destroy_matmul_desc(p.desc);
        let _ = lt::destroy_matrix_layout(p.a);
        let _ = lt::destroy_matrix_layout(p.b);
        let _ = lt::destroy_matrix_layout(p.d);
    }
}

#[cfg(test)]
mod tests {
    use tch::{Device, Kind, Tensor};

    /// Why the module exists: tch 0.24's `_addmm_activation` passes `use_gelu` as `beta`, so it
    /// computes a ReLU. If a tch update fixes the binding, this fails, and the binding could
    /// replace the hand-made cuBLASLt call.
    #[test]
    fn tch_addmm_activation_ignores_use_gelu() {
        tch::manual_seed(0);
        let x = Tensor::randn([4, 16], (Kind::Float, Device::Cpu));
        let w = Tensor::randn([8, 16], (Kind::Float, Device::Cpu));
        let b = Tensor::randn([8], (Kind::Float, Device::Cpu));
        let asked_gelu = b.internal_addmm_activation(&x, &w.tr(), true);
        let pre = x.linear(&w, Some(&b));
        assert!(asked_gelu.allclose(&pre.relu(), 1e-6, 1e-6, false));
        assert!(!asked_gelu.allclose(&pre.gelu("tanh"), 1e-3, 1e-3, false));
    }

    #[test]
    fn cpu_path_is_linear_then_gelu_tanh() {
        tch::manual_seed(1);
        let x = Tensor::randn([2, 3, 16], (Kind::Float, Device::Cpu));
        let w = Tensor::randn([8, 16], (Kind::Float, Device::Cpu));
        let b = Tensor::randn([8], (Kind::Float, Device::Cpu));
        let y = super::linear_gelu_tanh(&x, &w, &b);
        assert_eq!(y.size(), [2, 3, 8]);
        assert!(y.allclose(&x.linear(&w, Some(&b)).gelu("tanh"), 1e-6, 1e-6, false));
    }
}
