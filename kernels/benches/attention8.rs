//! 8-bit attention (both recipes as shipped, `ours` for e4m3 P·V and `f16pv` for f16, then each
//! option set from the plain recipe: `none`, a Q scale per row, bf16 P·V, V smoothed) against
//! bf16 SDPA (cuDNN on Hopper) at head
//! dim 128, one JSON line per length: milliseconds per call (quantization included) and the rate
//! in TOPS counting 4·N²·D·H operations. Run on the GPU machine by `host/scripts/gpu/attention8_bench.sh`.
//!
//!     cargo bench -p fastvideo-kernels --bench attention8

use std::time::Instant;

use fastvideo_kernels::attention8::{self, Pv, Recipe};
use tch::{Device, Kind, Tensor};

/// Milliseconds per call: the median of 5 timed batches of `runs` calls after a warm-up. One
/// batch at 32,760 tokens moved by ±6 % between runs of the same kernel (clock and power
/// state); the median of several is what variants are compared by.
fn time_ms(runs: usize, f: &dyn Fn() -> Tensor) -> f64 {
    let _ = f();
    tch::Cuda::synchronize(0);
    let mut batches: Vec<f64> = (0..5)
        .map(|_| {
            let t0 = Instant::now();
            for _ in 0..runs {
                let _ = f();
            }
            tch::Cuda::synchronize(0);
            t0.elapsed().as_secs_f64() * 1e3 / runs as f64
        })
        .collect();
    batches.sort_by(f64::total_cmp);
    batches[2]
}

fn main() {
    if fastvideo_torch::init().cuda_devices == 0 {
        eprintln!("no CUDA device: nothing to measure");
        return;
    }
    let device = Device::Cuda(0);
    if !attention8::available(device) {
        eprintln!("no sm_90a kernels on this GPU (8-bit attention needs compute capability 9.0)");
        return;
    }
    let heads: i64 = std::env::var("HEADS").ok().and_then(|s| s.parse().ok()).unwrap_or(12);
    // A kernel built with TRACE=1 (attention8.cu) leaves per-tile clocks at the start of its
    // output: one call per recipe at 32,760 tokens, those bytes written to this file's
    // `<recipe>.u32` siblings, and nothing timed.
    if let Ok(path) = std::env::var("ATTN8_TRACE") {
        let n = 32760;
        tch::manual_seed(0);
        let mk = || Tensor::randn([1, n, heads, 128], (Kind::BFloat16, device));
        let (q, k, v) = (mk(), mk(), mk());
        for (name, pv) in [("fp8pv", Pv::Fp8Pv), ("f16pv", Pv::F16Pv)] {
            let _ = attention8::attention(&q, &k, &v, pv);
            let o = attention8::attention(&q, &k, &v, pv);
            let words = o.flatten(0, -1).narrow(0, 0, 2 * 64 * 8 * 2).view_dtype(Kind::Int16).to_device(Device::Cpu);
            let words = Vec::<i16>::try_from(&words).expect("int16 trace");
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            std::fs::write(format!("{path}.{name}.u32"), bytes).expect("write the trace");
        }
        return;
    }
    for n in [4096i64, 8192, 16384, 32760, 75600] {
        tch::manual_seed(0);
        let mk = || Tensor::randn([1, n, heads, 128], (Kind::BFloat16, device));
        let (q, k, v) = (mk(), mk(), mk());
        let runs = (200_000 / n as usize).clamp(3, 50);
        let ours = time_ms(runs, &|| attention8::attention(&q, &k, &v, Pv::Fp8Pv));
        let qk = time_ms(runs, &|| attention8::attention(&q, &k, &v, Pv::F16Pv));
        let sdpa = time_ms(runs, &|| attention8::sdpa(&q, &k, &v));
        let ops = 4.0 * (n * n) as f64 * 128.0 * heads as f64;
        let tops = |ms: f64| ops / (ms * 1e-3) / 1e12;
        // The recipes' options side by side with the shipped kernels (`Recipe::with_options`).
        let mut options = Vec::new();
        for o in ["none", "qrow", "bf16", "qrow,bf16", "qrow,vmean"] {
            for pv in [Pv::Fp8Pv, Pv::F16Pv] {
                if pv == Pv::Fp8Pv && o.contains("bf16") {
                    continue; // a 16-bit P·V option
                }
                let r = Recipe::plain(pv).with_options(o).expect("known options");
                let ms = time_ms(runs, &|| attention8::attention_with(&q, &k, &v, r));
                options.push(format!("\"{}+{o}_tops\": {:.0}", pv.name(), tops(ms)));
            }
        }
        println!(
            "{{\"tokens\": {n}, \"heads\": {heads}, \"ours_ms\": {ours:.3}, \"f16pv_ms\": {qk:.3}, \"sdpa_ms\": {sdpa:.3}, \"ours_tops\": {:.0}, \"f16pv_tops\": {:.0}, \"sdpa_tflops\": {:.0}, \"speedup\": {:.3}, \"f16pv_speedup\": {:.3}, {}}}",
            tops(ours),
            tops(qk),
            tops(sdpa),
            sdpa / ours,
            sdpa / qk,
            options.join(", ")
        );
    }
}
