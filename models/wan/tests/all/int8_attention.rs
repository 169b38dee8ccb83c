//! 8-bit self-attention (`--int8-attention`) on the CPU: the model computes the quantized
//! function there (`fastvideo_kernels::attention8::reference`: INT8 Q·Kᵀ with smoothed K, FP8
//! P·V), so a forward and an evaluation measure what the Hopper kernel computes; the kernel is
//! checked against that function by `host/scripts/gpu/attention8.sh`.

use std::path::{Path, PathBuf};

use fastvideo_torch::Precision;
use fastvideo_wan::{LoadOptions, WanModel};
use tch::{Device, Kind, Tensor};

fn load(int8: bool) -> WanModel {
    let dir: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../default");
    let precision = if int8 { Precision::Bf16 } else { Precision::Exact };
    let opts = LoadOptions { int8_attention: int8, precision, ..LoadOptions::new(Device::Cpu) };
    WanModel::load_with(&dir, opts).expect("the default model loads")
}

#[test]
fn an_int8_attention_forward_stays_within_its_bound_of_the_exact_one() {
    let (exact, int8) = (load(false), load(true));
    assert!(int8.load_report.int8_attention && !exact.load_report.int8_attention);
    tch::manual_seed(5);
    let latents = Tensor::randn([1, 16, 5, 8, 8], (Kind::Float, Device::Cpu));
    let context = Tensor::randn([1, 16, 64], (Kind::Float, Device::Cpu));
    let t = Tensor::from_slice(&[700.0f32]);
    let want = exact.transformer.forward(&latents, &t, &context).unwrap();
    let got = int8.transformer.forward(&latents, &t, &context).unwrap();
    let e = (&got - &want).norm().double_value(&[]) / want.norm().double_value(&[]);
    eprintln!("int8 attention forward: relative L2 error {e}");
    // Every block's self-attention through INT8 logits and e4m3 probabilities and values: the op
    // alone is 1-6 % off on random inputs (kernels' attention8 tests), and the residual stream
    // carries only part of it to the velocity (measured 0.59 %). Bound: 2 %, and not exact.
    assert!(e > 1e-5 && e < 0.02, "relative L2 error of the int8-attention forward: {e}");
}
