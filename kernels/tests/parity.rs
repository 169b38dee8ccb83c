//! Each fused op against an independent float64 composition of the reference's formulas (the
//! fallback, on CPU, in CI), and each CUDA kernel against its fallback on the same inputs (on a
//! CUDA machine: `bash host/scripts/gpu/kernels.sh`, which runs this test binary there).
//!
//! Tolerances: fp32 within 2e-5 relative (reduction order differs); bf16/fp16 outputs within 1.5
//! units in the last place of their type relative to the row scale, i.e. 1.2e-2 (bf16) and
//! 1.5e-3 (fp16) relative max error, since both sides round once from slightly different fp32 values.

use fastvideo_kernels::{
    gated_residual, layer_norm_modulate, residual_layer_norm_modulate, residual_rms_norm_modulate, rms_norm_modulate,
    rms_norm_rope, rms_norm_rope_split, LayerNormSpec, RmsNormSpec,
};
use tch::{Device, Kind, Tensor};

/// Seeded draws from libtorch's global generator, one at a time (tests run on parallel threads).
fn randn(shape: &[i64], seed: i64) -> Tensor {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    tch::manual_seed(seed);
    Tensor::randn(shape, (Kind::Float, Device::Cpu))
}

/// max |a - b| / max |b|
fn rel(a: &Tensor, b: &Tensor) -> f64 {
    let a = a.to_kind(Kind::Double).to_device(Device::Cpu);
    let b = b.to_kind(Kind::Double).to_device(Device::Cpu);
    assert!(!bool::try_from(a.isnan().any()).unwrap(), "output has NaN (unwritten element?)");
    let num = f64::try_from((&a - &b).abs().max()).unwrap();
    let den = f64::try_from(b.abs().max()).unwrap().max(1e-12);
    num / den
}

/// The reference formulas in float64: diffusers' `(LN(x.float()) [*w+b]) * (1 + scale) + shift`.
fn reference_norm(x: &Tensor, w: Option<(&Tensor, &Tensor)>, m: Option<(&Tensor, &Tensor)>, eps: f64) -> Tensor {
    let x = x.to_kind(Kind::Double);
    let mean = x.mean_dim(-1, true, Kind::Double);
    let var = (&x - &mean).square().mean_dim(-1, true, Kind::Double);
    let mut h = (&x - &mean) / (var + eps).sqrt();
    if let Some((w, b)) = w {
        h = h * w.to_kind(Kind::Double) + b.to_kind(Kind::Double);
    }
    if let Some((sc, sh)) = m {
        h = h * (sc.to_kind(Kind::Double).unsqueeze(1) + 1.0) + sh.to_kind(Kind::Double).unsqueeze(1);
    }
    h
}

fn reference_rms_rope(x: &Tensor, w: &Tensor, cos: &Tensor, sin: &Tensor, head_dim: i64, eps: f64) -> Tensor {
    let (b, n, d) = x.size3().unwrap();
    let x = x.to_kind(Kind::Double);
    let r = (x.square().mean_dim(-1, true, Kind::Double) + eps).rsqrt();
    let y = x * r * w.to_kind(Kind::Double);
    let y = y.view([b, n, d / head_dim, head_dim / 2, 2]);
    let (a, c) = (y.select(-1, 0), y.select(-1, 1));
    let (cs, sn) = (cos.to_kind(Kind::Double).view([1, n, 1, -1]), sin.to_kind(Kind::Double).view([1, n, 1, -1]));
    Tensor::stack(&[&a * &cs - &c * &sn, &a * &sn + &c * &cs], -1).view([b, n, d])
}

/// LTX-2's split layout: RMSNorm across heads · w, then each head's halves rotated by that head's
/// own angles (`cos`, `sin` `[N, D/2]`, head-major).
fn reference_rms_rope_split(x: &Tensor, w: &Tensor, cos: &Tensor, sin: &Tensor, head_dim: i64, eps: f64) -> Tensor {
    let (b, n, d) = x.size3().unwrap();
    let x = x.to_kind(Kind::Double);
    let r = (x.square().mean_dim(-1, true, Kind::Double) + eps).rsqrt();
    let y = (x * r * w.to_kind(Kind::Double)).view([b, n, d / head_dim, head_dim]);
    let (a, c) = (y.narrow(-1, 0, head_dim / 2), y.narrow(-1, head_dim / 2, head_dim / 2));
    let shape = [1, n, d / head_dim, head_dim / 2];
    let (cs, sn) = (cos.to_kind(Kind::Double).view(shape), sin.to_kind(Kind::Double).view(shape));
    Tensor::cat(&[&a * &cs - &c * &sn, &c * &cs + &a * &sn], -1).view([b, n, d])
}

/// The RMS norms LTX-2's blocks use: weightless, modulated per sample (`[B, 1, D]` rows of one
/// table) and per token (`[B, N, D]`, image-to-video's per-token timesteps), with the residual.
fn check_rms_norms(c: &Case, device: Device, kind: Kind, tol: f64) {
    let (b, n, d) = c.x.size3().unwrap();
    let x = c.x.to_device(device).to_kind(kind);
    let y = c.y.to_device(device).to_kind(kind);
    let xr = x.to_kind(Kind::Double).to_device(Device::Cpu);
    let yr = y.to_kind(Kind::Double).to_device(Device::Cpu);
    let rms = |t: &Tensor| t * (t.square().mean_dim(-1, true, Kind::Double) + c.eps).rsqrt();
    // Per sample: chunks of one [B, 1, 3, D] tensor, as LTX-2's modulation comes.
    let per_sample = c.modulation.narrow(1, 0, 3).unsqueeze(1).to_device(device);
    // Per token: [B, N, 3, D] unbound on dim 2.
    let per_token = (randn(&[b, n, 3, d], 21) * 0.3).to_device(device);
    for (name, m) in [("per sample", per_sample), ("per token", per_token)] {
        let v = m.unbind(2);
        let (shift, scale, gate) = (&v[0], &v[1], &v[2]);
        let dbl = |t: &Tensor| t.to_device(Device::Cpu).to_kind(Kind::Double);
        let got = rms_norm_modulate(&x, &RmsNormSpec { eps: c.eps, modulation: Some((scale, shift)) });
        let want = rms(&xr) * (dbl(scale) + 1.0) + dbl(shift);
        let e = rel(&got, &want);
        assert!(e < tol, "{kind:?} {device:?} rms_norm_modulate {name} rel {e} >= {tol}");
        let spec = RmsNormSpec { eps: c.eps, modulation: Some((scale, shift)) };
        let (xn, h) = residual_rms_norm_modulate(&x, &y, Some(gate), &spec);
        let e = rel(&xn, &(&xr + &yr * dbl(gate)));
        assert!(e < tol, "{kind:?} {device:?} residual (rms) {name} rel {e} >= {tol}");
        let want = rms(&dbl(&xn)) * (dbl(scale) + 1.0) + dbl(shift);
        let e = rel(&h, &want);
        assert!(e < tol, "{kind:?} {device:?} residual + rms_norm_modulate {name} rel {e} >= {tol}");
    }
    let plain = rms_norm_modulate(&x, &RmsNormSpec { eps: c.eps, modulation: None });
    let e = rel(&plain, &rms(&xr));
    assert!(e < tol, "{kind:?} {device:?} rms_norm (no modulation) rel {e} >= {tol}");
}

fn check_rope_split(b: i64, n: i64, heads: i64, head_dim: i64, device: Device, kind: Kind, tol: f64) {
    let d = heads * head_dim;
    let qkv = randn(&[b, n, 3 * d], 31).to_device(device).to_kind(kind);
    let (q, k) = (qkv.narrow(2, 0, d), qkv.narrow(2, d, d));
    let wq = (randn(&[d], 32) * 0.2 + 1.0).to_device(device).to_kind(kind);
    let wk = (randn(&[d], 33) * 0.2 + 1.0).to_device(device).to_kind(kind);
    let ang = randn(&[n, d / 2], 34) * 3.0;
    let (cos, sin) = (ang.cos(), ang.sin());
    let out =
        rms_norm_rope_split(&[(&q, &wq), (&k, &wk)], 1e-6, head_dim, &cos.to_device(device), &sin.to_device(device));
    for (got, (x, w)) in out.iter().zip([(&q, &wq), (&k, &wk)]) {
        let want =
            reference_rms_rope_split(&x.to_device(Device::Cpu), &w.to_device(Device::Cpu), &cos, &sin, head_dim, 1e-6);
        let e = rel(got, &want);
        assert!(e < tol, "{kind:?} {device:?} rms_norm_rope_split ({heads}x{head_dim}) rel {e} >= {tol}");
    }
}

struct Case {
    x: Tensor,
    y: Tensor,
    w: Tensor,
    bias: Tensor,
    modulation: Tensor, // [B, 6, D] like Wan's per-block table + timestep embedding
    eps: f64,
}

fn case(b: i64, n: i64, d: i64, seed: i64) -> Case {
    Case {
        x: randn(&[b, n, d], seed) * 3.0 + 0.5,
        y: randn(&[b, n, d], seed + 1),
        w: randn(&[d], seed + 2) * 0.2 + 1.0,
        bias: randn(&[d], seed + 3) * 0.1,
        modulation: randn(&[b, 6, d], seed + 4) * 0.3,
        eps: 1e-6,
    }
}

fn chunks(m: &Tensor) -> Vec<Tensor> {
    m.chunk(6, 1)
}

fn check_norms(c: &Case, device: Device, kind: Kind, tol: f64) {
    let to = |t: &Tensor| t.to_device(device).to_kind(kind);
    let f32d = |t: &Tensor| t.to_device(device);
    let (x, y) = (to(&c.x), to(&c.y));
    let (w, bias) = (f32d(&c.w), f32d(&c.bias));
    let m = chunks(&f32d(&c.modulation));
    let (scale, shift, gate) = (&m[1], &m[0], &m[2]);
    // The reference sees the inputs as stored in `kind`.
    let (xr, yr) = (x.to_kind(Kind::Double).to_device(Device::Cpu), y.to_kind(Kind::Double).to_device(Device::Cpu));
    let cpu = |t: &Tensor| t.to_device(Device::Cpu).squeeze_dim(1);

    let spec = LayerNormSpec { eps: c.eps, affine: None, modulation: Some((scale, shift)) };
    let got = layer_norm_modulate(&x, &spec);
    let want = reference_norm(&xr, None, Some((&cpu(scale), &cpu(shift))), c.eps);
    let e = rel(&got, &want);
    assert!(e < tol, "{kind:?} {device:?} layer_norm_modulate rel {e} >= {tol}");

    let got = gated_residual(&x, &y, Some(gate));
    let want = &xr + &yr * cpu(gate).to_kind(Kind::Double).unsqueeze(1);
    let e = rel(&got, &want);
    assert!(e < tol, "{kind:?} {device:?} gated_residual rel {e} >= {tol}");

    let spec = LayerNormSpec { eps: c.eps, affine: Some((&w, &bias)), modulation: None };
    let (xn, h) = residual_layer_norm_modulate(&x, &y, None, &spec);
    let want_x = &xr + &yr;
    let e = rel(&xn, &want_x);
    assert!(e < tol, "{kind:?} {device:?} residual rel {e} >= {tol}");
    // The norm runs on the residual as stored (rounded), like the reference.
    let want = reference_norm(&xn.to_kind(Kind::Double).to_device(Device::Cpu), Some((&c.w, &c.bias)), None, c.eps);
    let e = rel(&h, &want);
    assert!(e < tol, "{kind:?} {device:?} residual+affine norm rel {e} >= {tol}");
}

fn rope_tables(n: i64, head_dim: i64, seed: i64) -> (Tensor, Tensor) {
    let ang = randn(&[n, head_dim / 2], seed) * 3.0;
    (ang.cos(), ang.sin())
}

fn check_rope(b: i64, n: i64, heads: i64, head_dim: i64, device: Device, kind: Kind, tol: f64) {
    let d = heads * head_dim;
    // q and k as slices of one fused projection [B, N, 3D], as the model computes them.
    let qkv = randn(&[b, n, 3 * d], 11).to_device(device).to_kind(kind);
    let (q, k) = (qkv.narrow(2, 0, d), qkv.narrow(2, d, d));
    let wq = (randn(&[d], 12) * 0.2 + 1.0).to_device(device).to_kind(kind);
    let wk = (randn(&[d], 13) * 0.2 + 1.0).to_device(device).to_kind(kind);
    let (cos, sin) = rope_tables(n, head_dim, 14);
    let (cosd, sind) = (cos.to_device(device), sin.to_device(device));
    let out = rms_norm_rope(&[(&q, &wq), (&k, &wk)], 1e-6, head_dim, Some((&cosd, &sind)));
    for (got, (x, w)) in out.iter().zip([(&q, &wq), (&k, &wk)]) {
        let want = reference_rms_rope(&x.to_device(Device::Cpu), &w.to_device(Device::Cpu), &cos, &sin, head_dim, 1e-6);
        let e = rel(got, &want);
        assert!(e < tol, "{kind:?} {device:?} rms_norm_rope rel {e} >= {tol}");
    }
    let plain = rms_norm_rope(&[(&q, &wq)], 1e-6, head_dim, None);
    let want = {
        let x = q.to_device(Device::Cpu).to_kind(Kind::Double);
        &x * (x.square().mean_dim(-1, true, Kind::Double) + 1e-6).rsqrt()
            * wq.to_device(Device::Cpu).to_kind(Kind::Double)
    };
    let e = rel(&plain[0], &want);
    assert!(e < tol, "{kind:?} {device:?} rms_norm (no rope) rel {e} >= {tol}");
}

#[test]
fn fallbacks_match_the_reference_formulas_on_cpu() {
    for (b, n, d) in [(1, 7, 64), (2, 5, 48), (2, 3, 40)] {
        check_norms(&case(b, n, d, 1), Device::Cpu, Kind::Float, 2e-5);
        check_norms(&case(b, n, d, 2), Device::Cpu, Kind::BFloat16, 1.2e-2);
    }
    check_rope(2, 6, 3, 16, Device::Cpu, Kind::Float, 2e-5);
    check_rope(1, 5, 2, 24, Device::Cpu, Kind::BFloat16, 1.2e-2);
    check_rms_norms(&case(2, 5, 48, 6), Device::Cpu, Kind::Float, 2e-5);
    check_rms_norms(&case(1, 7, 64, 7), Device::Cpu, Kind::BFloat16, 1.2e-2);
    check_rope_split(2, 6, 4, 16, Device::Cpu, Kind::Float, 2e-5);
    check_rope_split(1, 5, 2, 32, Device::Cpu, Kind::BFloat16, 1.2e-2);
}

/// Every fp32 fallback op is the same function the model computed before it used these ops, so
/// on CPU in fp32 this must hold bit for bit (the model's parity fixtures rely on it).
#[test]
fn fp32_fallback_equals_the_plain_tch_composition() {
    let c = case(2, 5, 32, 3);
    let m = chunks(&c.modulation);
    let spec = LayerNormSpec { eps: c.eps, affine: None, modulation: Some((&m[1], &m[0])) };
    let got = layer_norm_modulate(&c.x, &spec);
    let want = c.x.layer_norm([32], None::<Tensor>, None::<Tensor>, c.eps, true) * (&m[1] + 1.0) + &m[0];
    assert_eq!(f64::try_from((got - want).abs().max()).unwrap(), 0.0);
    let got = gated_residual(&c.x, &c.y, Some(&m[2]));
    let want = &c.x + &c.y * &m[2];
    assert_eq!(f64::try_from((got - want).abs().max()).unwrap(), 0.0);
}

/// Fills the caching allocator's free blocks with NaN so an output element the kernel fails to
/// write shows up as NaN instead of a stale value.
fn poison(device: Device) {
    let t = Tensor::full([64 << 20], f64::NAN, (Kind::Float, device));
    drop(t);
}

#[test]
fn cuda_kernels_match_their_fallbacks() {
    fastvideo_torch::init();
    if fastvideo_torch::init().cuda_devices == 0 {
        eprintln!("no CUDA device: the kernel side of this test runs on a GPU machine (host/scripts/gpu/kernels.sh)");
        return;
    }
    let device = Device::Cuda(0);
    assert!(fastvideo_kernels::cuda::device(0).is_some(), "kernels failed to compile on a CUDA machine");
    // Wan 1.3B and 14B widths, an odd token count, batch 1 and 2 (CFG rows), and one row wider
    // than 8192 (the kernels' `_wide` builds, several chunks per thread).
    for (b, n, d) in [(1, 257, 1536), (2, 33, 1536), (1, 17, 5120), (2, 9, 64), (1, 5, 9216)] {
        for (kind, tol) in [(Kind::Float, 2e-5), (Kind::BFloat16, 1.2e-2), (Kind::Half, 1.5e-3)] {
            poison(device);
            check_norms(&case(b, n, d, 5), device, kind, tol);
        }
    }
    for (kind, tol) in [(Kind::Float, 2e-5), (Kind::BFloat16, 1.2e-2), (Kind::Half, 1.5e-3)] {
        poison(device);
        check_rope(1, 300, 12, 128, device, kind, tol);
        check_rope(2, 40, 40, 128, device, kind, tol);
        check_rope(1, 20, 80, 128, device, kind, tol); // 10,240 wide: the `_wide` build
                                                       // LTX-2: the video stream (32 x 128), the audio stream (32 x 64), two samples.
        check_rms_norms(&case(2, 37, 4096, 8), device, kind, tol);
        check_rms_norms(&case(1, 19, 2048, 9), device, kind, tol);
        check_rope_split(1, 300, 32, 128, device, kind, tol);
        check_rope_split(2, 40, 32, 64, device, kind, tol);
        check_rope_split(2, 7, 8, 32, device, kind, tol);
    }
    // Kernel vs fallback on identical inputs: the kernel must be no worse than the fallback.
    let c = case(2, 129, 1536, 9);
    let x = c.x.to_device(device).to_kind(Kind::BFloat16);
    let m = chunks(&c.modulation.to_device(device));
    let spec = LayerNormSpec { eps: 1e-6, affine: None, modulation: Some((&m[1], &m[0])) };
    let fused = layer_norm_modulate(&x, &spec);
    fastvideo_kernels::set_enabled(false);
    let plain = layer_norm_modulate(&x, &spec);
    fastvideo_kernels::set_enabled(true);
    let e = rel(&fused, &plain);
    eprintln!("bf16 layer_norm_modulate, kernel vs fallback: max rel {e:.3e}");
    assert!(e < 1.2e-2, "kernel vs fallback rel {e}");
}

/// Share of elements that differ, and the largest difference relative to the row scale, between
/// two row-quantized tensors (dequantized).
fn fp8_diff(a: &(Tensor, Tensor), b: &(Tensor, Tensor)) -> (f64, f64) {
    let deq = |(v, s): &(Tensor, Tensor)| (v.to_kind(Kind::Float) * s).to_device(Device::Cpu);
    let (x, y) = (deq(a), deq(b));
    // Differ by more than the scales' last-bit difference.
    let close = x.isclose(&y, 1e-5, 0.0, false);
    let differ = 1.0 - f64::try_from(close.to_kind(Kind::Double).mean(Kind::Double)).unwrap();
    (differ, rel(&x, &y))
}

#[test]
fn cuda_fp8_quantization_and_gemm_match_their_fallbacks() {
    use fastvideo_kernels::fp8;
    if fastvideo_torch::init().cuda_devices == 0 {
        eprintln!("no CUDA device: runs on a GPU machine (host/scripts/gpu/kernels.sh)");
        return;
    }
    let device = Device::Cuda(0);
    let k = fastvideo_kernels::cuda::device(0).expect("kernels compile on a CUDA machine");
    if k.capability < (8, 9) {
        eprintln!("compute capability {:?}: no FP8 here", k.capability);
        return;
    }
    // Wan 1.3B's widths (model, FFN), an odd token count, and a small row.
    for (rows, d) in [(257, 1536), (33, 8960), (5, 64)] {
        for kind in [Kind::Float, Kind::BFloat16, Kind::Half] {
            let x = (randn(&[rows, d], 11) * 3.0).to_kind(kind).to_device(device);
            for gelu in [false, true] {
                poison(device);
                let q = if gelu { fp8::gelu_quantize(&x) } else { fp8::quantize(&x) };
                fastvideo_kernels::set_enabled(false);
                let r = if gelu { fp8::gelu_quantize(&x) } else { fp8::quantize(&x) };
                fastvideo_kernels::set_enabled(true);
                let scales = rel(&q.scales, &r.scales);
                let (differ, e) = fp8_diff(&(q.values, q.scales), &(r.values, r.scales));
                eprintln!("fp8 quantize {kind:?} [{rows}, {d}] gelu {gelu}: scales {scales:.1e}, {differ:.1e} of values differ, max rel {e:.2e}");
                // The scales may differ in their last bit (libtorch divides by a scalar as a
                // multiplication by its reciprocal), and GELU's tanh differs in the last bit
                // between implementations (then rounded to the activation dtype): either moves a
                // value across an e4m3 rounding boundary now and then. Bounds: scales within
                // 1e-6 (GELU: 1e-2, a bf16 step of the row maximum), at most 1 % of values one
                // e4m3 step apart (1/8 of the row maximum at worst).
                let (scale_tol, differ_tol, step) = if gelu { (1e-2, 1e-2, 0.125) } else { (1e-6, 1e-2, 0.125) };
                assert!(scales <= scale_tol && differ <= differ_tol && e <= step, "{kind:?} {rows}x{d} gelu {gelu}");
            }
        }
    }
    // The scaled GEMM against the float32 product of the same quantized operands.
    let x = randn(&[2, 300, 1536], 12).to_kind(Kind::BFloat16).to_device(device);
    let w = (randn(&[8960, 1536], 13) / 40.0).to_device(device);
    let b = randn(&[8960], 14).to_kind(Kind::BFloat16).to_device(device);
    let (w8, sw) = fp8::quantize_weight(&w);
    let y = fp8::linear(&x, &w8, &sw, Some(&b));
    let q = fp8::quantize(&x);
    let want = fp8::reference(&q.values, &q.scales, &w8, &sw, Some(&b)).view([2, 300, 8960]);
    let e = rel(&y, &want);
    eprintln!("fp8 scaled GEMM vs float32 reference: max rel {e:.2e}");
    // bf16 output (8 bits of mantissa) and fast accumulation: within 1 %.
    assert!(e < 1e-2, "scaled GEMM vs reference {e}");
}

#[test]
fn cuda_gelu_epilogue_beats_the_two_ops_against_float32() {
    use fastvideo_kernels::linear_gelu::{fused_calls, linear_gelu_tanh};
    if fastvideo_torch::init().cuda_devices == 0 {
        eprintln!("no CUDA device: runs on a GPU machine (host/scripts/gpu/kernels.sh)");
        return;
    }
    let device = Device::Cuda(0);
    // Wan 1.3B's FFN and text projection, CFG rows, a small odd case.
    for (b, n, inp, out, kind) in [
        (1, 257, 1536, 8960, Kind::BFloat16),
        (2, 33, 1536, 8960, Kind::Half),
        (1, 512, 4096, 1536, Kind::BFloat16),
        (1, 5, 64, 24, Kind::BFloat16),
    ] {
        let x = randn(&[b, n, inp], 21).to_kind(kind).to_device(device);
        let w = (randn(&[out, inp], 22) / (inp as f64).sqrt()).to_kind(kind).to_device(device);
        let bias = (randn(&[out], 23) * 0.1).to_kind(kind).to_device(device);
        let want =
            x.to_kind(Kind::Float).linear(&w.to_kind(Kind::Float), Some(&bias.to_kind(Kind::Float))).gelu("tanh");
        poison(device);
        let before = fused_calls();
        let fused = linear_gelu_tanh(&x, &w, &bias);
        assert_eq!(fused_calls(), before + 1, "the epilogue did not run for {inp} -> {out}");
        let mut plain = x.linear(&w, Some(&bias));
        let _ = plain.gelu_("tanh");
        let (ef, ep) = (rel_l2(&fused, &want), rel_l2(&plain, &want));
        eprintln!("GELU epilogue {kind:?} [{b}, {n}, {inp}] -> {out}: vs float32 {ef:.2e} (two ops {ep:.2e})");
        // One rounding to the output dtype instead of two (the pre-activation too): no worse
        // than the two ops, with 10 % slack for the GEMM's own summation order.
        assert!(ef <= ep * 1.1 && fused.size() == [b, n, out], "{kind:?} {inp} -> {out}: {ef} vs {ep}");
    }
    // A width the epilogue refuses (rows not on 16 bytes) takes the two ops.
    let x = randn(&[3, 12], 24).to_kind(Kind::BFloat16).to_device(device);
    let w = randn(&[16, 12], 25).to_kind(Kind::BFloat16).to_device(device);
    let bias = randn(&[16], 26).to_kind(Kind::BFloat16).to_device(device);
    let before = fused_calls();
    let y = linear_gelu_tanh(&x, &w, &bias);
    assert_eq!(fused_calls(), before);
    assert!(y.equal(&x.linear(&w, Some(&bias)).gelu("tanh")));
}

fn rel_l2(a: &Tensor, b: &Tensor) -> f64 {
    let a = a.to_kind(Kind::Double).to_device(Device::Cpu);
    let b = b.to_kind(Kind::Double).to_device(Device::Cpu);
    assert!(!bool::try_from(a.isnan().any()).unwrap(), "output has NaN (unwritten element?)");
    f64::try_from((&a - &b).norm()).unwrap() / f64::try_from(b.norm()).unwrap()
}

/// Q, K, V `[B, N, H, 128]` like a DiT's after RMS norm and RoPE: unit-scale queries and keys
/// with a per-channel offset on the keys (what smoothing removes) and a few outlier channels.
fn attention_inputs(b: i64, nq: i64, nk: i64, h: i64, seed: i64) -> (Tensor, Tensor, Tensor) {
    let q = randn(&[b, nq, h, 128], seed) * 1.5;
    let outliers = Tensor::ones([128], (Kind::Float, Device::Cpu)).index_fill(0, &Tensor::from_slice(&[3i64, 77]), 6.0);
    let k = (randn(&[b, nk, h, 128], seed + 1) + randn(&[1, 1, h, 128], seed + 2) * 3.0) * outliers;
    let v = randn(&[b, nk, h, 128], seed + 3);
    (q, k, v)
}

#[test]
fn cuda_8bit_attention_matches_sdpa_within_its_bound() {
    use fastvideo_kernels::attention8::{self, Pv, Recipe};
    if fastvideo_torch::init().cuda_devices == 0 {
        eprintln!("no CUDA device: runs on a GPU machine (host/scripts/gpu/kernels.sh)");
        return;
    }
    let device = Device::Cuda(0);
    if !attention8::available(device) {
        eprintln!("no sm_90a kernels on this GPU: 8-bit attention falls back to SDPA");
        return;
    }
    // Every kernel: e4m3, f16 and bf16 P·V, each with one Q scale per 16 rows and per row, and
    // with V smoothed.
    let recipes: Vec<Recipe> = ["", "qrow", "qrow,vmean"]
        .into_iter()
        .flat_map(|q| {
            [(Pv::Fp8Pv, ""), (Pv::F16Pv, ""), (Pv::F16Pv, "bf16")]
                .map(|(pv, o)| Recipe::plain(pv).with_options(&format!("{q},{o}")).expect("known options"))
        })
        .collect();
    // Odd lengths (padding and the masked last tile), batch 2 (CFG rows), cross lengths, and a
    // longer sequence; plus a strided view (heads narrowed out of a wider tensor).
    let mut errors = Vec::new();
    for (b, nq, nk, h) in [(1, 128, 64, 1), (2, 1000, 777, 3), (1, 300, 4100, 2), (1, 4680, 4680, 4)] {
        let (q, k, v) = attention_inputs(b, nq, nk, h, 21);
        let [q, k, v] = [q, k, v].map(|t| t.to_kind(Kind::BFloat16).to_device(device));
        assert!(attention8::fits(&q, &k, &v).is_some(), "the kernel takes [{b}, {nq}, {h}, 128]");
        let exact = attention8::sdpa(&q.to_kind(Kind::Float), &k.to_kind(Kind::Float), &v.to_kind(Kind::Float));
        let e_bf16 = rel_l2(&attention8::sdpa(&q, &k, &v), &exact);
        for &r in &recipes {
            poison(device);
            let got = attention8::attention_with(&q, &k, &v, r);
            let emulated = attention8::reference(&q, &k, &v, r);
            let (e, e_ref) = (rel_l2(&got, &exact), rel_l2(&got, &emulated));
            eprintln!(
                "attention8 {r:?} [{b}, {nq}/{nk}, {h}, 128]: vs float32 SDPA {e:.2e} (bf16 SDPA {e_bf16:.2e}), vs its float32 emulation {e_ref:.2e}"
            );
            errors.push((r, b, nq, nk, e, e_ref, e_bf16));
        }
    }
    // SageAttention2 reports ~1-3 % relative error for INT8 Q·Kᵀ + FP8 P·V; these inputs are
    // harsher (outlier key channels), and short key sequences average P's e4m3 rounding over few
    // terms. The emulation differs from the kernel by P's rounding against the running row maximum
    // and bf16 output rounding (measured 1.3-1.5 %: two independent e4m3 roundings of P). Bounds:
    // 8 % against exact attention, 2.5 % against the emulation (a wrong key order or scale is
    // off by tens of percent).
    // With 16-bit P·V only the INT8 logits approximate, and on these outlier keys they carry most
    // of the error (measured on the H200: 5.0-5.8 % against 5.8-6.5 % with e4m3 P·V): bound 7 %,
    // and below the FP8 recipe with the same Q scales on the same inputs. The f16 kernel's
    // emulation differs only by bf16 output rounding and f16 accumulation order (measured
    // 0.17-0.20 %); bf16 P (8 significant bits) rounded against the running maximum adds about
    // a sixteenth of e4m3's difference. Bound 1 %, which a P or V fragment in the wrong order or
    // a row's Q scale taken from another row exceeds.
    let fp8_error = |r: Recipe, b, nq, nk| {
        let fp8 = Recipe { pv: Pv::Fp8Pv, bf16_pv: false, ..r };
        errors.iter().find(|x| x.0 == fp8 && (x.1, x.2, x.3) == (b, nq, nk)).map(|x| x.4)
    };
    for &(r, b, nq, nk, e, e_ref, e_bf16) in &errors {
        let (bound, ref_bound) = match r.pv {
            Pv::Fp8Pv => (0.08, 0.025),
            Pv::F16Pv => (0.07, 0.01),
        };
        if r.pv == Pv::F16Pv {
            let fp8 = fp8_error(r, b, nq, nk).expect("both recipes ran");
            assert!(e < fp8, "[{b}, {nq}/{nk}] {r:?} further from exact than e4m3 P·V: {e} vs {fp8}");
        }
        assert!(e < bound, "[{b}, {nq}/{nk}] {r:?} 8-bit attention vs SDPA: {e}");
        assert!(e_ref < ref_bound, "[{b}, {nq}/{nk}] {r:?} 8-bit attention vs its emulation: {e_ref}");
        assert!(
            e > e_bf16,
            "[{b}, {nq}/{nk}] {r:?}: a quantized kernel is not closer than bf16 SDPA ({e} vs {e_bf16})"
        );
    }
    // Query rows of very different norms (gains 2^-6..2^2): on the small ones a scale per row is
    // what keeps their logits' precision (the emulation of these inputs: 4.7x less error; a
    // scale read from another row would not halve it).
    let (q, k, v) = attention_inputs(1, 1000, 1000, 2, 41);
    let gains = (randn(&[1, 1000, 1, 1], 42).sigmoid() * 8.0 - 6.0).exp2();
    let q = &q * &gains;
    let small = gains.lt(0.125).view([-1]).nonzero().view([-1]).to_device(device);
    let [q, k, v] = [q, k, v].map(|t| t.to_kind(Kind::BFloat16).to_device(device));
    let exact = attention8::sdpa(&q.to_kind(Kind::Float), &k.to_kind(Kind::Float), &v.to_kind(Kind::Float));
    let on_small = |r: Recipe| {
        let got = attention8::attention_with(&q, &k, &v, r);
        rel_l2(&got.index_select(1, &small), &exact.index_select(1, &small))
    };
    let f16 = Recipe::plain(Pv::F16Pv);
    let (shared, per_row) = (on_small(f16), on_small(Recipe { q_per_row: true, ..f16 }));
    eprintln!("attention8 on {} small query rows: per 16 rows {shared:.2e}, per row {per_row:.2e}", small.size()[0]);
    assert!(per_row < shared / 2.0, "small rows: per row {per_row} against per 16 rows {shared}");

    // Values with a large offset per channel: smoothing V takes it out of e4m3 P·V's rounding,
    // and adds it back exactly (the emulation of these inputs: 4.1x less error; a wrong mean, or
    // one added twice, would be far off).
    let (q, k, v) = attention_inputs(1, 1000, 1000, 2, 51);
    let v = v + randn(&[1, 1, 2, 128], 52) * 8.0;
    let [q, k, v] = [q, k, v].map(|t| t.to_kind(Kind::BFloat16).to_device(device));
    let exact = attention8::sdpa(&q.to_kind(Kind::Float), &k.to_kind(Kind::Float), &v.to_kind(Kind::Float));
    let fp8 = Recipe::plain(Pv::Fp8Pv);
    let e = |r: Recipe| rel_l2(&attention8::attention_with(&q, &k, &v, r), &exact);
    let (plain, smooth) = (e(fp8), e(Recipe { v_smooth: true, ..fp8 }));
    eprintln!("attention8 e4m3 P·V on offset values: {plain:.2e}, with V smoothed {smooth:.2e}");
    assert!(smooth < plain / 2.0, "offset values: smoothed {smooth} against {plain}");

    let (q, k, v) = attention_inputs(1, 500, 500, 6, 31);
    let [q, k, v] = [q, k, v].map(|t| t.to_kind(Kind::BFloat16).to_device(device).narrow(2, 1, 4));
    assert!(!q.is_contiguous() && attention8::fits(&q, &k, &v).is_some());
    for &r in &recipes {
        let e = rel_l2(&attention8::attention_with(&q, &k, &v, r), &attention8::sdpa(&q, &k, &v));
        eprintln!("attention8 {r:?} on strided heads: vs bf16 SDPA {e:.2e}");
        assert!(e < 0.08, "strided {r:?}: {e}");
    }
}

/// Paged decode attention against gathering each request's pages and running SDPA (the fallback)
/// in float32: ragged lengths across block edges, a length-1 request (three warps see nothing),
/// grouped heads 2 and 8, head dims 128 and 64. Bound: 1e-2 relative L2 (bf16 inputs and output;
/// measured below it).
#[test]
fn cuda_paged_decode_matches_gathered_sdpa() {
    use fastvideo_kernels::paged_decode;
    if fastvideo_torch::init().cuda_devices == 0 {
        eprintln!("no CUDA device: runs on a GPU machine (host/scripts/gpu/kernels.sh)");
        return;
    }
    let device = Device::Cuda(0);
    for (heads, kv_heads, d, block) in [(16i64, 8i64, 128i64, 16i64), (32, 4, 128, 16), (8, 8, 64, 32)] {
        let lens = [1i64, 17, 300, 64];
        let b = lens.len() as i64;
        let per: Vec<i64> = lens.iter().map(|l| (l + block - 1) / block).collect();
        let blocks: i64 = per.iter().sum::<i64>() + 3;
        let kp = randn(&[blocks, kv_heads, block, d], 1).to_kind(Kind::BFloat16).to_device(device);
        let vp = randn(&[blocks, kv_heads, block, d], 2).to_kind(Kind::BFloat16).to_device(device);
        let q = (randn(&[b, heads, d], 3) * 2.0).to_kind(Kind::BFloat16).to_device(device);
        // Blocks handed out in reverse, so tables are not the identity.
        let mut next = blocks - 1;
        let max_blocks = *per.iter().max().unwrap();
        let mut table = vec![0i64; (b * max_blocks) as usize];
        for (r, n) in per.iter().enumerate() {
            for j in 0..*n {
                table[r * max_blocks as usize + j as usize] = next;
                next -= 1;
            }
        }
        let table_t = Tensor::from_slice(&table).view([b, max_blocks]).to_device(device);
        let lens_t = Tensor::from_slice(&lens).to_device(device);
        let got = paged_decode::attention(&q, &kp, &vp, &table_t, &lens_t).expect("the kernel applies");
        for (r, &len) in lens.iter().enumerate() {
            let ids = Tensor::from_slice(&table[r * max_blocks as usize..][..per[r] as usize]).to_device(device);
            let gather = |p: &Tensor| {
                p.index_select(0, &ids)
                    .permute([1, 0, 2, 3])
                    .reshape([1, kv_heads, -1, d])
                    .narrow(2, 0, len)
                    .to_kind(Kind::Float)
            };
            let (k, v) = (gather(&kp), gather(&vp));
            let g = heads / kv_heads;
            let (k, v) = (k.repeat_interleave_self_int(g, 1, None), v.repeat_interleave_self_int(g, 1, None));
            let qr = q.narrow(0, r as i64, 1).unsqueeze(2).to_kind(Kind::Float);
            let want = Tensor::scaled_dot_product_attention(&qr, &k, &v, None::<Tensor>, 0.0, false, None, false)
                .squeeze_dim(2);
            let err = rel_l2(&got.narrow(0, r as i64, 1), &want);
            eprintln!("paged decode heads {heads}/{kv_heads} d {d} len {len}: rel L2 {err:.2e}");
            assert!(err < 1e-2, "heads {heads}/{kv_heads} d {d} len {len}: {err}");
        }
    }
}
