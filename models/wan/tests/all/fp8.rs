//! FP8 linears (`--fp8-linears`) on the CPU: which linears are stored in FP8, how far its forward
//! moves from the float one, and adapters on FP8 weights. The CPU computes the FP8 product by
//! its reference (the same quantized values, multiplied in float32); the GPU's scaled GEMM is
//! checked against it by `host/scripts/gpu/fp8_gemm_bench.py`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use fastvideo_pipeline::{AdapterRows, AdapterSet, AdapterTarget};
use fastvideo_torch::Precision;
use fastvideo_wan::{LoadOptions, WanModel};
use tch::{Device, Kind, Tensor};

fn default_model() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../default")
}

fn load(fp8: bool) -> WanModel {
    let precision = if fp8 { Precision::Bf16 } else { Precision::Exact };
    let opts = LoadOptions { fp8_linears: fp8, precision, ..LoadOptions::new(Device::Cpu) };
    WanModel::load_with(&default_model(), opts).expect("the default model loads")
}

fn inputs() -> (Tensor, Tensor, Tensor) {
    tch::manual_seed(3);
    let latents = Tensor::randn([1, 16, 5, 8, 8], (Kind::Float, Device::Cpu));
    let context = Tensor::randn([1, 16, 64], (Kind::Float, Device::Cpu));
    (latents, Tensor::from_slice(&[700.0f32]), context)
}

fn rel_l2(a: &Tensor, b: &Tensor) -> f64 {
    (a - b).norm().double_value(&[]) / b.norm().double_value(&[])
}

#[test]
fn fast_keeps_the_boundary_blocks_and_stores_the_inner_ones_in_fp8() {
    let m = load(true);
    assert_eq!((m.load_report.precision, m.load_report.fp8_linears), (Precision::Bf16, true));
    let groups = m.transformer.linear_groups();
    let fp8 = |g: &[&fastvideo_wan::nn::Linear]| g.iter().all(|l| l.is_fp8() && l.weight.kind() == Kind::Float8e4m3fn);
    let float = |g: &[&fastvideo_wan::nn::Linear]| g.iter().all(|l| !l.is_fp8() && l.weight.kind() == Kind::Float);
    let n = m.transformer.blocks.len();
    assert!(float(&groups[0]), "embedders and head stay float");
    assert!(float(&groups[1]) && float(&groups[n]), "the first and the last block stay float");
    assert!(groups[2..n].iter().all(|g| fp8(g)), "every inner block's linears are FP8");
}

#[test]
fn an_fp8_forward_stays_within_the_bound_of_the_float_one() {
    let (exact, fast) = (load(false), load(true));
    let (x, t, c) = inputs();
    let want = exact.transformer.forward(&x, &t, &c).unwrap();
    let got = fast.transformer.forward(&x, &t, &c).unwrap();
    let e = rel_l2(&got, &want);
    eprintln!("fp8 forward: relative L2 error {e}");
    // Six of eight blocks through e4m3 (3 mantissa bits) weights and activations: each linear
    // alone is ~3 % off (kernels' fp8 test); the velocity measured 2.2 % here. Bound: 4 %.
    assert!(e > 1e-4 && e < 0.04, "relative L2 error of the FP8 forward: {e}");
}

#[test]
fn adapters_run_unmerged_on_fp8_weights_and_merging_is_refused() {
    let m = load(true);
    let file =
        fastvideo_lora::LoraFile::read(&default_model().join("../default-lora-large/large.safetensors")).unwrap();
    let prepared = Arc::new(m.transformer.prepare_adapter(&file, "large", "hash").unwrap());
    let set = AdapterSet::bound(vec![(prepared, 1.0, None)]);
    let target = fastvideo_wan::adapters::WanAdapters::of(&m);
    assert!(!target.can_merge());
    let err = m.transformer.merge_adapters(&set).unwrap_err().to_string();
    assert!(err.contains("FP8"), "{err}");
    // A weight update's permanent merge too: FP8 values have no room for a delta (an update merges
    // into the full-precision weights, then quantizes).
    let err = m.transformer.merge_permanently(&set).unwrap_err().to_string();
    assert!(err.contains("FP8"), "{err}");
    let (x, t, c) = inputs();
    let plain = m.transformer.forward(&x, &t, &c).unwrap();
    let rows = AdapterRows::every(Some(&set)).unwrap();
    let adapted = m.transformer.forward_adapted(&x, &t, &c, None, Some(&rows), None).unwrap();
    assert!(rel_l2(&adapted, &plain) > 1e-3, "the adapter changes the output");
}
