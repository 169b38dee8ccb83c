//! `gelu_tanh(x Wᵀ + b)` as one cuBLASLt GEMM whose epilogue adds the bias and applies the GELU,
//! so the FFN's widest activation (`[rows, 8960]` in Wan 1.3B) is written once instead of
//! written, read and written again by a separate GELU pass.
//!
//! Why not `torch._addmm_activation`, which does the same: tch 0.24's binding of it passes
//! `use_gelu` where the C++ function takes `beta`, so the call computes `relu(x Wᵀ + b)` whatever
//! is asked (the test below keeps an eye on that). This module calls cuBLASLt itself, the copy
//! libtorch has loaded ([`crate::cublaslt`]), on the stream libtorch's kernels use; the matmul
//! plan is chosen once per shape and kept.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use anyhow::{anyhow, bail, Result};
use cudarc::cublaslt::sys;

use crate::cublaslt::{self, check, Api};
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
    if s.last() != Some(&inp) || bias.size() != [out] || inp <= 0 || out <= 0 || inp % 8 != 0 || out % 8 != 0 {
        return None;
    }
    let on_device = weight.device() == x.device() && bias.device() == x.device();
    if !on_device || !weight.is_contiguous() || !bias.is_contiguous() {
        return None;
    }
    let rows: i64 = s[..s.len() - 1].iter().product();
    if rows == 0 {
        return None;
    }
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
    let kernels = crate::cuda::for_tensor(x)?;
    let x2 = x.contiguous();
    if ![&x2, weight, bias].iter().all(|t| crate::cuda::aligned(t)) {
        return None;
    }
    let mut shape = s[..s.len() - 1].to_vec();
    shape.push(out);
    let y = Tensor::f_empty(shape.as_slice(), (kind, x.device())).ok()?;
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

/// Plans kept at most (each a few small host-side descriptors).
const MAX_PLANS: usize = 256;

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
    let api = match cublaslt::api() {
        Ok(api) => api,
        Err(e) => {
            st.missing = true;
            bail!("{e}");
        }
    };
    kernels.bind()?;
    let (handle, ws_ptr) = match st.handles.entry(key.ordinal) {
        Entry::Occupied(e) => (e.get().0, e.get().1.data_ptr()),
        Entry::Vacant(v) => {
            let ws = Tensor::f_empty([WORKSPACE], (Kind::Uint8, x.device()))
                .map_err(|e| anyhow!("cuBLASLt workspace ({WORKSPACE} bytes): {e}"))?;
            let mut h = std::ptr::null_mut();
            // SAFETY: writes one handle.
            if let Err(e) = check(unsafe { (api.create)(&mut h) }, "cublasLtCreate") {
                st.missing = true;
                return Err(e);
            }
            let (h, ws) = v.insert((h, ws));
            (*h, ws.data_ptr())
        }
    };
    // A server sees as many row counts as it sees request sizes: past MAX_PLANS, start over
    // rather than keep descriptors for every size ever served.
    if st.plans.len() >= MAX_PLANS && !st.plans.contains_key(&key) {
        for (_, p) in st.plans.drain() {
            drop_plan(api, &p);
        }
    }
    let plan = match st.plans.entry(key) {
        Entry::Occupied(e) => e.into_mut(),
        Entry::Vacant(v) => v.insert(make_plan(api, handle, key)?),
    };
    let bias_ptr = bias.data_ptr() as u64;
    let (alpha, beta) = (1f32, 0f32);
    let stream = crate::graph::capture_stream().unwrap_or(std::ptr::null_mut()) as sys::cudaStream_t;
    // SAFETY: the plan's descriptors live in the state (locked); shapes, dtypes, devices,
    // contiguity and alignment of every pointer were checked against the plan's key by the
    // caller; the workspace is this device's, used in stream order.
    unsafe {
        let attr = sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_BIAS_POINTER;
        check((api.desc_set)(plan.desc, attr, (&bias_ptr) as *const u64 as *const c_void, 8), "bias pointer")?;
        // Column-major view: D (out × rows) = op(A = W stored in × out)ᵀ · B (x stored in × rows).
        let status = (api.matmul)(
            handle,
            plan.desc,
            (&alpha) as *const f32 as *const c_void,
            w.data_ptr(),
            plan.a,
            x.data_ptr(),
            plan.b,
            (&beta) as *const f32 as *const c_void,
            y.data_ptr(),
            plan.d,
            y.data_ptr(),
            plan.d,
            &plan.algo,
            ws_ptr,
            WORKSPACE as usize,
            stream,
        );
        check(status, "cublasLtMatmul")
    }
}

fn make_plan(api: &Api, handle: sys::cublasLtHandle_t, key: PlanKey) -> Result<Plan> {
    use sys::cublasLtMatmulDescAttributes_t as A;
    use sys::cublasLtMatmulPreferenceAttributes_t as P;
    let t = data_type(key.half);
    let (m, n, k) = (key.out as u64, key.rows as u64, key.inp as u64);
    let mut plan = Plan {
        desc: std::ptr::null_mut(),
        a: std::ptr::null_mut(),
        b: std::ptr::null_mut(),
        d: std::ptr::null_mut(),
        algo: sys::cublasLtMatmulAlgo_t { data: [0; 8] },
    };
    let mut pref = std::ptr::null_mut();
    // SAFETY: each call writes one descriptor or sets a correctly sized attribute on a live one;
    // whatever was created is destroyed below on failure.
    let made = unsafe {
        (|| -> Result<()> {
            let compute = sys::cublasComputeType_t::CUBLAS_COMPUTE_32F;
            check((api.desc_create)(&mut plan.desc, compute, sys::cudaDataType::CUDA_R_32F), "matmul descriptor")?;
            check((api.layout_create)(&mut plan.a, t, k, m, key.inp), "layout of W")?;
            check((api.layout_create)(&mut plan.b, t, k, n, key.inp), "layout of x")?;
            check((api.layout_create)(&mut plan.d, t, m, n, key.out), "layout of the output")?;
            let gelu = sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_GELU_BIAS as u32;
            for (attr, v, what) in [
                (A::CUBLASLT_MATMUL_DESC_TRANSA, 1u32, "transpose of W"),
                (A::CUBLASLT_MATMUL_DESC_TRANSB, 0, "transpose of x"),
                (A::CUBLASLT_MATMUL_DESC_EPILOGUE, gelu, "GELU_BIAS epilogue"),
            ] {
                check((api.desc_set)(plan.desc, attr, (&v) as *const u32 as *const c_void, 4), what)?;
            }
            check((api.pref_create)(&mut pref), "preference")?;
            let ws = WORKSPACE as u64;
            let attr = P::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES;
            check((api.pref_set)(pref, attr, (&ws) as *const u64 as *const c_void, 8), "workspace size")?;
            // Every pointer is checked for 16-byte alignment before a call.
            for attr in [
                P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
            ] {
                check((api.pref_set)(pref, attr, (&16u32) as *const u32 as *const c_void, 4), "alignment")?;
            }
            let mut result = std::mem::MaybeUninit::<sys::cublasLtMatmulHeuristicResult_t>::zeroed();
            let mut count = 0;
            let (h, desc, (a, b, d)) = (handle, plan.desc, (plan.a, plan.b, plan.d));
            check((api.heuristic)(h, desc, a, b, d, d, pref, 1, result.as_mut_ptr(), &mut count), "algorithm")?;
            let result = result.assume_init();
            if count == 0 {
                bail!(
                    "no cuBLASLt algorithm for [{}, {}] x [{}, {}]ᵀ with GELU_BIAS",
                    key.rows,
                    key.inp,
                    key.out,
                    key.inp
                );
            }
            check(result.state, "algorithm")?;
            plan.algo = result.algo;
            Ok(())
        })()
    };
    // SAFETY: created above (or null, which is skipped), not used after this.
    unsafe {
        if !pref.is_null() {
            (api.pref_destroy)(pref);
        }
    }
    match made {
        Ok(()) => Ok(plan),
        Err(e) => {
            drop_plan(api, &plan);
            Err(e)
        }
    }
}

fn drop_plan(api: &Api, p: &Plan) {
    // SAFETY: created by make_plan (null ones skipped) and no longer referenced.
    unsafe {
        if !p.desc.is_null() {
            (api.desc_destroy)(p.desc);
        }
        for l in [p.a, p.b, p.d] {
            if !l.is_null() {
                (api.layout_destroy)(l);
            }
        }
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
        let _rng = crate::seeded(0);
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
        let _rng = crate::seeded(1);
        let x = Tensor::randn([2, 3, 16], (Kind::Float, Device::Cpu));
        let w = Tensor::randn([8, 16], (Kind::Float, Device::Cpu));
        let b = Tensor::randn([8], (Kind::Float, Device::Cpu));
        let y = super::linear_gelu_tanh(&x, &w, &b);
        assert_eq!(y.size(), [2, 3, 8]);
        assert!(y.allclose(&x.linear(&w, Some(&b)).gelu("tanh"), 1e-6, 1e-6, false));
    }
}
