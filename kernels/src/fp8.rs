//! FP8 (e4m3) linears (`--fp8-linears`): weights quantized once at load with one scale per
//! output channel, activations per token at run time, and the product through cuBLASLt's scaled
//! GEMM (`torch._scaled_mm`), which on Hopper runs 1.6–1.9× the bf16 rate at Wan's shapes
//! (`host/scripts/gpu/fp8_gemm_bench.py`). Activations are quantized by one kernel pass
//! (`kernels/cuda/quant.cu`; tch ops took longer than the GEMM they feed), optionally fused with
//! the FFN's GELU. Where the scaled GEMM cannot run (a CPU, a dimension not a multiple of 16) the
//! fallback computes the same function: the same quantized values, dequantized and multiplied
//! in float32.

use tch::{Device, Kind, Tensor};

use crate::cuda::{self, Arg};

/// The largest finite e4m3 value: each row's absolute maximum maps onto it.
pub const E4M3_MAX: f64 = 448.0;

/// cuBLASLt's fast FP8 accumulation: 4–20 % faster at Wan's shapes on the H200 with the same
/// error against bf16 (3.75e-2 relative either way; `fp8_gemm_bench.py`).
const FAST_ACCUM: bool = true;

/// Activations quantized by rows, ready for [`linear_quantized`]: several linears reading the
/// same input (attention's projections) quantize it once.
pub struct Quantized {
    /// `[M, K]` e4m3.
    pub values: Tensor,
    /// `[M, 1]` float32.
    pub scales: Tensor,
    /// The input's leading dimensions (`M` is their product).
    lead: Vec<i64>,
    /// The input's dtype, which outputs take.
    kind: Kind,
    device: Device,
}

/// Quantizes `x [M, K]` by rows in tch ops: e4m3 values and float32 scales `[M, 1]` such that
/// `x ≈ values × scales`, each row's absolute maximum landing on [`E4M3_MAX`]. An all-zero row
/// gets a tiny scale and zeros (no NaN). The kernel computes the same.
pub fn quantize_rows(x: &Tensor) -> (Tensor, Tensor) {
    if x.device() == Device::Cpu && int8_emulation() {
        return quantize_rows_int8(x);
    }
    let scale = row_scales(x, E4M3_MAX);
    let values = (x.to_kind(Kind::Float) / &scale).to_kind(Kind::Float8e4m3fn);
    (values, scale)
}

/// Float32 `[M, 1]` scales putting each row's absolute maximum on `max` (tiny for a zero row).
fn row_scales(x: &Tensor, max: f64) -> Tensor {
    x.abs().amax([1i64].as_slice(), true).to_kind(Kind::Float).clamp_min(1e-12) / max
}

/// Research switch, CPU only: `FASTVIDEO_LINEAR_EMULATE=int8` rounds the FP8 linears' weights and
/// activations to INT8 steps instead of e4m3 (same per-channel and per-token scales, absmax / 127),
/// to measure on the quality gate what INT8 linears would cost before any kernel exists for them
/// (host/scripts/cpu/results/2026-12-04-int8-linears/).
fn int8_emulation() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("FASTVIDEO_LINEAR_EMULATE").is_ok_and(|v| v == "int8"))
}

/// [`quantize_rows`] onto INT8 steps: float32 values in -127..=127 and scales `[M, 1]`.
fn quantize_rows_int8(x: &Tensor) -> (Tensor, Tensor) {
    let scale = row_scales(x, 127.0);
    let values = (x.to_kind(Kind::Float) / &scale).round().clamp(-127.0, 127.0);
    (values, scale)
}

/// `w [out, in]` with one scale per output channel: e4m3 `[out, in]` and float32 `[out]`, row
/// `i` of `w` being about `values[i] × scale[i]`.
pub fn quantize_weight(w: &Tensor) -> (Tensor, Tensor) {
    let (values, scale) = quantize_rows(w);
    (values, scale.view([-1]))
}

/// `x [..., K]` quantized per token.
pub fn quantize(x: &Tensor) -> Quantized {
    quantize_with(x, false)
}

/// `gelu_tanh(x)` (rounded to `x`'s dtype) quantized per token: the FFN's activation and the
/// quantization of the linear after it in one pass.
pub fn gelu_quantize(x: &Tensor) -> Quantized {
    quantize_with(x, true)
}

fn quantize_with(x: &Tensor, gelu: bool) -> Quantized {
    let mut lead = x.size();
    let k = lead.pop().unwrap_or(0);
    let x2 = x.reshape([-1, k]);
    let (values, scales) = match try_kernel(&x2, gelu) {
        Some(q) => q,
        None if gelu => quantize_rows(&x2.gelu("tanh")),
        None => quantize_rows(&x2),
    };
    Quantized { values, scales, lead, kind: x.kind(), device: x.device() }
}

/// The quantize kernel for a contiguous `[M, K]` CUDA tensor on a device with FP8 conversions
/// (compute capability 8.9 on), else `None`.
fn try_kernel(x: &Tensor, gelu: bool) -> Option<(Tensor, Tensor)> {
    let k = cuda::for_tensor(x)?;
    let (rows, d) = x.size2().ok()?;
    if k.capability < (8, 9) || !cuda::row_fits(d) || !x.is_contiguous() || !cuda::aligned(x) || rows == 0 {
        return None;
    }
    let suffix = match x.kind() {
        Kind::Float => "f32",
        Kind::BFloat16 => "bf16",
        Kind::Half => "f16",
        _ => return None,
    };
    let name = format!("{}quantize_fp8_{suffix}", if gelu { "gelu_" } else { "" });
    let values = Tensor::empty([rows, d], (Kind::Float8e4m3fn, x.device()));
    let scales = Tensor::empty([rows, 1], (Kind::Float, x.device()));
    let args = [
        Arg::Ptr(x.data_ptr() as u64),
        Arg::Ptr(values.data_ptr() as u64),
        Arg::Ptr(scales.data_ptr() as u64),
        Arg::I32(d as i32),
    ];
    k.launch_rows(&name, rows, 1, d, &args).ok()?;
    Some((values, scales))
}

/// `x W^T + b` with `W` in FP8 (`w8`, `scale` as [`quantize_weight`] makes them), `x` quantized
/// per token on the fly; the output in `x`'s dtype and shape `[..., out]`.
pub fn linear(x: &Tensor, w8: &Tensor, scale: &Tensor, bias: Option<&Tensor>) -> Tensor {
    linear_quantized(&quantize(x), w8, scale, bias)
}

/// [`linear`] from activations already quantized.
pub fn linear_quantized(q: &Quantized, w8: &Tensor, scale: &Tensor, bias: Option<&Tensor>) -> Tensor {
    let k = q.values.size()[1];
    let n = w8.size()[0];
    let out_kind = q.kind;
    // cuBLASLt wants the second operand column-major: W^T of a row-major W is.
    let scaled = scaled_mm_fits(q.device, out_kind, k, n)
        .then(|| {
            let fused_bias = bias.filter(|b| b.kind() == out_kind);
            let y = q.values.f_internal_scaled_mm(
                &w8.tr(),
                &q.scales,
                &scale.view([1, -1]),
                fused_bias,
                None::<&Tensor>,
                out_kind,
                FAST_ACCUM,
            );
            y.map(|y| match (bias, fused_bias) {
                (Some(b), None) => y + b.to_kind(out_kind),
                _ => y,
            })
        })
        .and_then(|r| {
            r.map_err(|e| tracing::warn!(error = %e, "FP8 scaled GEMM failed; using its float32 reference")).ok()
        });
    let y = scaled.unwrap_or_else(|| reference(&q.values, &q.scales, w8, scale, bias).to_kind(out_kind));
    let mut shape = q.lead.clone();
    shape.push(n);
    y.view(shape.as_slice())
}

/// The scaled GEMM's conditions: a CUDA device with FP8 tensor cores (compute capability 8.9
/// on), both inner dimensions multiples of 16, bf16 output (the one every backend of row-wise
/// scaling writes).
fn scaled_mm_fits(device: Device, kind: Kind, k: i64, n: i64) -> bool {
    let Device::Cuda(ordinal) = device else { return false };
    kind == Kind::BFloat16 && k % 16 == 0 && n % 16 == 0 && supports_fp8(ordinal)
}

/// Whether CUDA device `ordinal` has FP8 tensor cores (asked once through the kernels' context).
pub fn supports_fp8(ordinal: usize) -> bool {
    cuda::device(ordinal).is_some_and(|k| k.capability >= (8, 9))
}

/// The same product in float32 from the quantized values (the CPU path, and the parity
/// reference for the GPU one).
pub fn reference(x8: &Tensor, sx: &Tensor, w8: &Tensor, scale: &Tensor, bias: Option<&Tensor>) -> Tensor {
    let x = x8.to_kind(Kind::Float) * sx;
    let wt = w8.to_kind(Kind::Float) * scale.view([-1, 1]);
    x.linear(&wt, bias.map(|b| b.to_kind(Kind::Float)).as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(a: &Tensor, b: &Tensor) -> f64 {
        let d = (a.to_kind(Kind::Float) - b.to_kind(Kind::Float)).norm().double_value(&[]);
        d / b.to_kind(Kind::Float).norm().double_value(&[])
    }

    #[test]
    fn rows_keep_their_maximum_and_zero_rows_stay_zero() {
        let x = Tensor::from_slice(&[1.0f32, -3.0, 0.5, 0.0, 0.0, 0.0]).view([2, 3]);
        let (v, s) = quantize_rows(&x);
        assert_eq!(v.kind(), Kind::Float8e4m3fn);
        let back = v.to_kind(Kind::Float) * &s;
        assert_eq!(back.double_value(&[0, 1]), -3.0, "the row's absmax round-trips exactly");
        assert_eq!(back.narrow(0, 1, 1).abs().sum(Kind::Float).double_value(&[]), 0.0);
        assert_eq!(back.isnan().any().int64_value(&[]), 0, "no NaN from a zero row");
    }

    #[test]
    fn an_fp8_linear_is_within_e4m3_rounding_of_the_float_one() {
        let _rng = crate::seeded(0);
        let x = Tensor::randn([2, 40, 64], (Kind::Float, Device::Cpu));
        let wt = Tensor::randn([48, 64], (Kind::Float, Device::Cpu)) / 8.0;
        let b = Tensor::randn([48], (Kind::Float, Device::Cpu));
        let want = x.linear(&wt, Some(&b));
        let (w8, scale) = quantize_weight(&wt);
        let got = linear(&x, &w8, &scale, Some(&b));
        assert_eq!(got.size(), [2, 40, 48]);
        // e4m3 keeps 3 mantissa bits (relative step 2^-3 at worst, ~2^-5 RMS per value); over
        // 64-term dot products of two quantized operands the output's relative L2 error sits
        // near 3 %. Bound: 6 %.
        let e = rel(&got, &want);
        assert!(e < 0.06 && e > 1e-4, "relative error {e}");
    }

    #[test]
    fn the_int8_emulation_rounds_onto_integer_steps_and_beats_e4m3() {
        let _rng = crate::seeded(2);
        let x = Tensor::randn([2, 40, 64], (Kind::Float, Device::Cpu)).reshape([80, 64]);
        let wt = Tensor::randn([48, 64], (Kind::Float, Device::Cpu)) / 8.0;
        let (xv, xs) = quantize_rows_int8(&x);
        let (wv, ws) = quantize_rows_int8(&wt);
        assert_eq!(f64::try_from((&xv - xv.round()).abs().max()).unwrap(), 0.0, "integer steps");
        // Each row's largest magnitude lands on 127.
        let top = xv.abs().amax([1i64].as_slice(), false);
        assert!(top.eq(127.0).all().int64_value(&[]) == 1, "row maxima on 127");
        let want = x.linear(&wt, None::<&Tensor>);
        let e8 = rel(&reference(&xv, &xs, &wv, &ws.view([-1]), None), &want);
        let (fv, fs) = quantize_rows(&x);
        let (gv, gs) = quantize_weight(&wt);
        let e_fp8 = rel(&reference(&fv, &fs, &gv, &gs, None), &want);
        // Uniform steps of max/127 on Gaussian rows (max ≈ 2.5-3.5σ) give ~1 % per value, against
        // e4m3's ~3 %: the INT8 product lands well under the FP8 one.
        assert!(e8 < 0.02 && e8 < e_fp8 / 2.0, "int8 {e8} vs e4m3 {e_fp8}");
    }

    #[test]
    fn the_gelu_variant_quantizes_the_activation() {
        let _rng = crate::seeded(1);
        let x = Tensor::randn([3, 5, 32], (Kind::Float, Device::Cpu));
        let q = gelu_quantize(&x);
        let want = quantize(&x.gelu("tanh"));
        assert!(q.values.to_kind(Kind::Float).equal(&want.values.to_kind(Kind::Float)));
        assert!(q.scales.equal(&want.scales));
        assert_eq!((q.lead.clone(), q.kind), (vec![3, 5], Kind::Float));
    }
}
