//! FP8 linears (`--fp8-linears`) on the CPU, and FP8-stored checkpoints: which linears are stored in FP8, how far its forward
//! moves from the float one, and adapters on FP8 weights. The CPU computes the FP8 product by
//! its reference (the same quantized values, multiplied in float32); the GPU's scaled GEMM is
//! checked against it by `host/scripts/gpu/fp8_gemm_bench.py`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use fastvideo_pipeline::{AdapterRows, AdapterSet, AdapterTarget};
use fastvideo_torch::Precision;
use fastvideo_wan::lora_keys::WanKeys;
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
    let fp8 = |g: &[&fastvideo_layers::Linear]| g.iter().all(|l| l.is_fp8() && l.weight.kind() == Kind::Float8e4m3fn);
    let float = |g: &[&fastvideo_layers::Linear]| g.iter().all(|l| !l.is_fp8() && l.weight.kind() == Kind::Float);
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
        fastvideo_lora::LoraFile::read(&default_model().join("../default-lora-large/large.safetensors"), &WanKeys)
            .unwrap();
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

/// `tests/fixtures/tiny-wan` with the blocks' linear weights stored in FP8 as published FP8
/// checkpoints store them: e4m3 values and a scale beside each, per output channel
/// (`weight_scale`, ModelOpt) or one per tensor (`scale_weight`, ComfyUI) in turn; `drop_scale`
/// leaves one scale out. Returns the folder and the dequantized `to_v` of block 0.
fn fp8_stored_copy(drop_scale: bool) -> (tempfile::TempDir, Tensor) {
    use safetensors::tensor::{Dtype, TensorView};
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny-wan");
    let dir = tempfile::tempdir().unwrap();
    crate::common::copy_dir(&fixtures, dir.path());
    let file = dir.path().join("transformer/diffusion_pytorch_model.safetensors");
    let tensors = Tensor::read_safetensors(&file).unwrap();
    let mut out: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    let bytes = |t: &Tensor| Vec::<u8>::try_from(t.contiguous().view([-1]).view_dtype(Kind::Uint8)).unwrap();
    let mut to_v = None;
    for (i, (name, t)) in tensors.iter().enumerate() {
        let shape: Vec<usize> = t.size().iter().map(|&d| d as usize).collect();
        let linear = name.starts_with("blocks.") && name.ends_with(".weight") && t.dim() == 2;
        if !linear {
            out.push((name.clone(), Dtype::F32, shape, bytes(&t.to_kind(Kind::Float))));
            continue;
        }
        let per_channel = i % 2 == 0;
        let amax = if per_channel { t.abs().amax([1i64].as_slice(), true) } else { t.abs().max().view([1, 1]) };
        let scale = amax.clamp_min(1e-12) / 448.0;
        let w8 = (t / &scale).to_kind(Kind::Float8e4m3fn);
        if name == "blocks.0.attn1.to_v.weight" {
            to_v = Some(w8.to_kind(Kind::Float) * &scale);
        }
        out.push((name.clone(), Dtype::F8_E4M3, shape.clone(), bytes(&w8)));
        let module = name.trim_end_matches(".weight");
        if drop_scale && name == "blocks.1.ffn.net.2.weight" {
            continue;
        }
        let (key, s, sshape) = if per_channel {
            ("weight_scale", scale.view([-1]), vec![shape[0]])
        } else {
            ("scale_weight", scale.view([]), vec![])
        };
        out.push((format!("{module}.{key}"), Dtype::F32, sshape, bytes(&s)));
    }
    let views: Vec<(String, TensorView)> =
        out.iter().map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap())).collect();
    std::fs::write(&file, safetensors::serialize(views, None).unwrap()).unwrap();
    (dir, to_v.expect("block 0 has to_v"))
}

#[test]
fn fp8_stored_checkpoints_load_dequantized_with_their_scales() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny-wan");
    let plain = WanModel::load(&fixtures, Device::Cpu).unwrap();
    let (dir, to_v) = fp8_stored_copy(false);
    let m = WanModel::load(dir.path(), Device::Cpu).unwrap();
    // Block 0's groups: to_qk, to_v, to_out, ... (linear_groups()[1] is block 0).
    let loaded = &m.transformer.linear_groups()[1][1].weight;
    assert!(loaded.equal(&to_v), "the weight is exactly values x scale");
    tch::manual_seed(4);
    let x = Tensor::randn([1, 4, 2, 4, 6], (Kind::Float, Device::Cpu));
    let c = Tensor::randn([1, 8, 32], (Kind::Float, Device::Cpu));
    let t = Tensor::from_slice(&[500.0f32]);
    let e = rel_l2(&m.transformer.forward(&x, &t, &c).unwrap(), &plain.transformer.forward(&x, &t, &c).unwrap());
    // Every block linear through e4m3 weights (activations stay float): a few percent at most.
    assert!(e > 1e-5 && e < 0.05, "FP8-stored checkpoint vs the float one: relative L2 {e}");

    let (dir, _) = fp8_stored_copy(true);
    let err = format!("{:#}", WanModel::load(dir.path(), Device::Cpu).err().expect("a scale is missing"));
    assert!(err.contains("blocks.1.ffn.net.2.weight") && err.contains("weight_scale"), "{err}");
}

/// An FP8 checkpoint's e4m3 weights kept for the FP8 GEMM (`Weights::keep_fp8`: what
/// `--fp8-linears` does with an FP8 file, in the blocks it quantizes): here every block linear of
/// ComfyUI's `fp8_scaled` fixture (tests/fixtures/make_fp8_fixtures.py). The kept linears are
/// FP8 with the file's scales as they are (fused q‖k‖v included), and the forward stays within
/// the FP8 activations' error of the same file dequantized (3e-2 relative L2 here, where a
/// scale misapplied moves it by orders of magnitude more).
#[test]
fn an_fp8_files_weights_feed_the_fp8_gemm_as_stored() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    let cfg =
        fastvideo_wan::transformer::TransformerConfig::load(&root.join("tiny-wan/transformer/config.json")).unwrap();
    let file = root.join("fp8/wan_fp8_scaled.safetensors");
    let build = |keep: bool| {
        let w = fastvideo_wan::single_file::weights(&file, Device::Cpu, Kind::Float).unwrap();
        if keep {
            w.keep_fp8(Box::new(|key| key.starts_with("blocks.")));
        }
        let t = fastvideo_wan::transformer::WanTransformer3DModel::new(cfg.clone(), &w).unwrap();
        assert_eq!(w.kept_fp8_count(), if keep { 20 } else { 0 });
        t
    };
    let (kept, plain) = (build(true), build(false));
    let blocks: Vec<_> = kept.linear_groups().into_iter().skip(1).flatten().map(|l| l.is_fp8()).collect();
    assert!(!blocks.is_empty() && blocks.iter().all(|&f| f), "every block linear is FP8: {blocks:?}");
    assert!(kept.linear_groups()[0].iter().all(|l| !l.is_fp8()), "outside the blocks: dense");
    tch::manual_seed(3);
    let latents = Tensor::randn([1, 4, 3, 4, 4], (Kind::Float, Device::Cpu));
    let context = Tensor::randn([1, 8, 32], (Kind::Float, Device::Cpu));
    let t = Tensor::from_slice(&[700.0f32]);
    let (a, b) = (kept.forward(&latents, &t, &context).unwrap(), plain.forward(&latents, &t, &context).unwrap());
    let e = rel_l2(&a, &b);
    assert!(e > 0.0 && e < 3e-2, "{e:.2e}");
}
