//! `--transformer FILE`: a Wan folder's transformer weights from one file as the original
//! release and ComfyUI publish it (`tests/fixtures/make_single_file_fixtures.py`: tiny-wan's
//! transformer with its weights moved, in the original key layout, bare and under
//! `model.diffusion_model.`). `generate` makes the frames diffusers' pipeline makes with those
//! weights; a file that does not fit the folder is one error line naming the file and the key.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tch::{Kind, Tensor};

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(rel)
}

fn generate(model: &Path, transformer: &Path, dir: &Path) -> Output {
    generate_with_noise_of("single_file/outputs.safetensors", model, transformer, dir, &[])
}

/// `fastvideo generate` of the fixtures' case (32x32, 9 frames, 4 steps, guidance 5, fp32 on the
/// CPU) with `--transformer` and the `latents` of `outputs` (a fixture file) as its noise.
pub(crate) fn generate_with_noise_of(
    outputs: &str,
    model: &Path,
    transformer: &Path,
    dir: &Path,
    extra: &[&str],
) -> Output {
    std::fs::create_dir_all(dir).unwrap();
    let f: HashMap<String, Tensor> = Tensor::read_safetensors(fixture(outputs)).unwrap().into_iter().collect();
    let noise = dir.join("noise.safetensors");
    Tensor::write_safetensors(&[("latents", &f["latents"])], &noise).unwrap();
    let args = [
        "generate",
        "--model",
        model.to_str().unwrap(),
        "--transformer",
        transformer.to_str().unwrap(),
        "--prompt",
        "a red circle moving left on a white background",
        "--negative-prompt",
        "blurry low quality",
        "--height",
        "32",
        "--width",
        "32",
        "--frames",
        "9",
        "--steps",
        "4",
        "--guidance",
        "5",
        "--device",
        "cpu",
        "--dtype",
        "fp32",
        "--noise",
    ];
    let frames = dir.join("frames");
    let out = dir.join("out.mp4");
    Command::new(env!("CARGO_BIN_EXE_fastvideo"))
        .args(args)
        .arg(&noise)
        .arg("--frames-dir")
        .arg(&frames)
        .arg("--out")
        .arg(&out)
        .args(extra)
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap()
}

/// Both layouts make the pipeline's frames: float32 on both sides, half an 8-bit step of
/// rounding plus 1e-3 (4.3e-3 would be a whole step).
#[test]
fn a_single_file_transformer_makes_the_pipelines_frames() {
    let want = &Tensor::read_safetensors(fixture("single_file/outputs.safetensors")).unwrap();
    let video = want.iter().find(|(k, _)| k == "video").unwrap().1.get(0).permute([0, 2, 3, 1]);
    for file in ["wan_original.safetensors", "wan_comfy.safetensors"] {
        let dir = tempfile::tempdir().unwrap();
        let r = generate(&fixture("tiny-wan"), &fixture(&format!("single_file/{file}")), dir.path());
        assert!(r.status.success(), "{file}: {}", String::from_utf8_lossy(&r.stderr));
        let e = (frames(dir.path()) - &video).abs().max().double_value(&[]);
        assert!(e < 0.5 / 255.0 + 1e-3, "{file}: {e:.2e}");
    }
}

/// The 9 frames `generate` wrote under `dir/frames`, `[9, 32, 32, 3]` in [0, 1].
pub(crate) fn frames(dir: &Path) -> Tensor {
    let frames: Vec<Tensor> = (0..9)
        .map(|i| {
            let img = image::open(dir.join(format!("frames/frame_{i:04}.png"))).unwrap().to_rgb8();
            Tensor::from_slice(img.as_raw()).view([32, 32, 3]).to_kind(Kind::Float) / 255.0
        })
        .collect();
    Tensor::stack(&frames, 0)
}

/// A copy of the original-layout file with `edit` applied to its tensors.
fn edited(dir: &Path, name: &str, edit: impl FnOnce(&mut Vec<(String, Tensor)>)) -> PathBuf {
    let mut t = Tensor::read_safetensors(fixture("single_file/wan_original.safetensors")).unwrap();
    edit(&mut t);
    let path = dir.join(name);
    let refs: Vec<(&str, &Tensor)> = t.iter().map(|(k, v)| (k.as_str(), v)).collect();
    Tensor::write_safetensors(&refs, &path).unwrap();
    path
}

#[test]
fn a_file_that_does_not_fit_is_refused_naming_the_file_and_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let zeros = |shape: &[i64]| Tensor::zeros(shape, (Kind::Float, tch::Device::Cpu));
    let cases: Vec<(PathBuf, &str)> = vec![
        (
            edited(d, "case0.safetensors", |t| t.push(("blocks.0.self_attn.x.weight".into(), zeros(&[24, 24])))),
            "`blocks.0.self_attn.x.weight` is not a tensor of a Wan transformer in the original layout",
        ),
        (
            edited(d, "case1.safetensors", |t| t.retain(|(k, _)| k != "blocks.1.ffn.2.weight")),
            "missing tensor `blocks.1.ffn.net.2.weight`",
        ),
        (
            edited(d, "case2.safetensors", |t| {
                t.iter_mut().find(|(k, _)| k == "head.head.weight").unwrap().1 = zeros(&[16, 20]);
            }),
            "`head.head.weight` (the model's `proj_out.weight`) has shape [16, 20]",
        ),
        // An image-to-video model's tensor in a text-to-video folder's file.
        (
            edited(d, "case3.safetensors", |t| t.push(("img_emb.emb_pos".into(), zeros(&[1, 514, 24])))),
            "`img_emb.emb_pos` is not a tensor of this folder's transformer",
        ),
    ];
    for (i, (case, want)) in cases.into_iter().enumerate() {
        let r = generate(&fixture("tiny-wan"), &case, &d.join(format!("out{i}")));
        crate::common::assert_user_error(&r, want);
        assert!(String::from_utf8_lossy(&r.stderr).contains(&format!("case{i}.safetensors")), "names the file");
    }
    // Not a safetensors file at all.
    let junk = d.join("junk.safetensors");
    std::fs::write(&junk, b"PK\x03\x04....").unwrap();
    crate::common::assert_user_error(
        &generate(&fixture("tiny-wan"), &junk, &d.join("j")),
        "not a readable safetensors file",
    );
    // A family that reads no single file says so.
    let flux = generate(&fixture("tiny-flux2-klein"), &fixture("single_file/wan_original.safetensors"), &d.join("f"));
    crate::common::assert_user_error(&flux, "FLUX.2 reads no single-file transformer yet (--transformer)");
}

/// ComfyUI's `fp8_scaled` file (tests/fixtures/make_fp8_fixtures.py: e4m3 block linears with a
/// per-tensor `scale_weight`, the `scaled_fp8` marker, under `model.diffusion_model.`): in
/// float32 its weights are dequantized as ComfyUI does and the frames are the pipeline's on those
/// weights (tolerance as above); the load line names the lossy format. With `--fp8-linears` the
/// e4m3 values of the blocks that recipe quantizes would feed the FP8 GEMM as stored; tiny-wan's
/// two blocks are its boundary blocks, which stay dequantized (`models/wan/tests/all/fp8.rs`
/// checks the kept path).
#[test]
fn an_fp8_scaled_file_makes_the_pipelines_frames() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let file = fixture("fp8/wan_fp8_scaled.safetensors");
    let want = Tensor::read_safetensors(fixture("fp8/outputs.safetensors")).unwrap();
    let video = want.iter().find(|(k, _)| k == "video").unwrap().1.get(0).permute([0, 2, 3, 1]);
    let r = generate_with_noise_of("fp8/outputs.safetensors", &fixture("tiny-wan"), &file, &d.join("a"), &[]);
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{stderr}");
    assert!(stderr.contains("weights: FP8 (scaled) ×20, dequantized at load"), "{stderr}");
    let e = (frames(&d.join("a")) - &video).abs().max().double_value(&[]);
    assert!(e < 0.5 / 255.0 + 1e-3, "{e:.2e}");
    let fast = ["--precision", "fast", "--fp8-linears"];
    let r = generate_with_noise_of("fp8/outputs.safetensors", &fixture("tiny-wan"), &file, &d.join("b"), &fast);
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{stderr}");
    assert!(stderr.contains("weights: FP8 (scaled) ×20, dequantized at load"), "{stderr}");
    let e = (frames(&d.join("b")) - &video).abs().max().double_value(&[]);
    assert!(e < 0.5 / 255.0 + 1e-3, "{e:.2e}");
    // A NaN scale is refused naming the file's tensor.
    let mut bytes = std::fs::read(&file).unwrap();
    let key = "model.diffusion_model.blocks.1.ffn.2.scale_weight";
    let (header, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let (start, _) = meta.info(key).unwrap().data_offsets;
    let at = 8 + header + start;
    bytes[at..at + 4].copy_from_slice(&f32::NAN.to_le_bytes());
    let nan = d.join("nan.safetensors");
    std::fs::write(&nan, bytes).unwrap();
    let r = generate_with_noise_of("fp8/outputs.safetensors", &fixture("tiny-wan"), &nan, &d.join("c"), &[]);
    crate::common::assert_user_error(&r, &format!("nan.safetensors: tensor `{key}` has a NaN or infinite scale"));
}

/// An NVIDIA ModelOpt FP8 export in diffusers' layout (`quantization_config` with its ignore
/// list, `weight_scale` beside each FP8 weight) as a folder's transformer: the pipeline's frames
/// on the dequantized weights; a list that disagrees with the weights, and an algorithm not run,
/// are refused naming the key.
#[test]
fn a_modelopt_fp8_folder_makes_the_pipelines_frames() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let model = d.join("model");
    crate::common::copy_dir(&fixture("tiny-wan"), &model);
    std::fs::remove_dir_all(model.join("transformer")).unwrap();
    crate::common::copy_dir(&fixture("fp8/modelopt_transformer"), &model.join("transformer"));
    let run = |sub: &str| {
        let want = fixture("fp8/modelopt_outputs.safetensors");
        let f: HashMap<String, Tensor> = Tensor::read_safetensors(&want).unwrap().into_iter().collect();
        let dir = d.join(sub);
        std::fs::create_dir_all(&dir).unwrap();
        let noise = dir.join("noise.safetensors");
        Tensor::write_safetensors(&[("latents", &f["latents"])], &noise).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_fastvideo"))
            .args(["generate", "--model"])
            .arg(&model)
            .args([
                "--prompt",
                "a red circle moving left on a white background",
                "--negative-prompt",
                "blurry low quality",
            ])
            .args(["--height", "32", "--width", "32", "--frames", "9", "--steps", "4", "--guidance", "5"])
            .args(["--device", "cpu", "--dtype", "fp32", "--noise"])
            .arg(&noise)
            .arg("--frames-dir")
            .arg(dir.join("frames"))
            .arg("--out")
            .arg(dir.join("out.mp4"))
            .output()
            .unwrap();
        (out, f["video"].get(0).permute([0, 2, 3, 1]))
    };
    let (r, video) = run("a");
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{stderr}");
    assert!(stderr.contains("weights: FP8 (scaled) ×20, dequantized at load"), "{stderr}");
    let e = (frames(&d.join("a")) - &video).abs().max().double_value(&[]);
    assert!(e < 0.5 / 255.0 + 1e-3, "{e:.2e}");
    let config = model.join("transformer/config.json");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replace("\"proj_out\",", "\"proj_out\", \"blocks.0.attn1.to_q\",")).unwrap();
    crate::common::assert_user_error(
        &run("b").0,
        "`blocks.0.attn1.to_q` is on quantization_config.ignore, but its weight is stored in FP8",
    );
    std::fs::write(&config, text.replace("\"FP8\"", "\"NVFP4\"")).unwrap();
    crate::common::assert_user_error(
        &run("c").0,
        "config key `quantization_config.quant_algo` = NVFP4 is not supported",
    );
}
