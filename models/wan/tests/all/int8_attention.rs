//! 8-bit self-attention (`--int8-attention`, `--int8-qk-attention`) on the CPU: the model
//! computes the quantized function there (`fastvideo_kernels::attention8::reference`: INT8 Q·Kᵀ
//! with smoothed K, then e4m3 or f16 P·V), so a forward and an evaluation measure what the Hopper
//! kernel computes; the kernel is checked against that function by
//! `host/scripts/gpu/attention8.sh`.

use std::path::{Path, PathBuf};

use fastvideo_torch::{Int8Attention, Precision};
use fastvideo_wan::{LoadOptions, WanModel};
use tch::{Device, Kind, Tensor};

fn load(recipe: Option<Int8Attention>) -> WanModel {
    let dir: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../default");
    let precision = if recipe.is_some() { Precision::Bf16 } else { Precision::Exact };
    let opts = LoadOptions { int8_attention: recipe, precision, ..LoadOptions::new(Device::Cpu) };
    WanModel::load_with(&dir, opts).expect("the default model loads")
}

#[test]
fn an_int8_attention_forward_stays_within_its_bound_of_the_exact_one() {
    let exact = load(None);
    tch::manual_seed(5);
    let latents = Tensor::randn([1, 16, 5, 8, 8], (Kind::Float, Device::Cpu));
    let context = Tensor::randn([1, 16, 64], (Kind::Float, Device::Cpu));
    let t = Tensor::from_slice(&[700.0f32]);
    let want = exact.transformer.forward(&latents, &t, &context).unwrap();
    let mut errors = Vec::new();
    for recipe in [Int8Attention::Fp8Pv, Int8Attention::F16Pv] {
        let int8 = load(Some(recipe));
        assert_eq!(int8.load_report.int8_attention, Some(recipe));
        let got = int8.transformer.forward(&latents, &t, &context).unwrap();
        let e = (&got - &want).norm().double_value(&[]) / want.norm().double_value(&[]);
        eprintln!("{} forward: relative L2 error {e}", recipe.name());
        errors.push(e);
    }
    // Every block's self-attention through INT8 logits and e4m3 probabilities and values (the
    // shipped recipes: per-row Q scales, and V smoothed for e4m3): the op alone is 1-6 % off on
    // random inputs (kernels' attention8 tests), and the residual stream carries only part of it
    // to the velocity (measured 0.39 %; 0.59 % with per-16 Q scales and V as it comes). Bound: 2 %,
    // and not exact.
    let (fp8, f16) = (errors[0], errors[1]);
    assert!(fp8 > 1e-5 && fp8 < 0.02, "relative L2 error of the int8-attention forward: {fp8}");
    // With f16 P·V only the INT8 logits approximate: well under the e4m3 recipe's error
    // (measured 0.17 %).
    assert!(f16 > 1e-6 && f16 < fp8 / 2.0, "int8-qk-attention forward {f16} against int8-attention {fp8}");
}
