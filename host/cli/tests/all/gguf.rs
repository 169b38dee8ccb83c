//! `--transformer FILE.gguf`: a Wan transformer as ComfyUI-GGUF publishes it
//! (`tests/fixtures/make_gguf_fixtures.py`: original keys, rows of 256 with
//! `comfy.gguf.orig_shape`, the 5-D patch embedding in F32, block linears in every quant type
//! we read). `generate` makes the frames diffusers' pipeline makes with the weights gguf-py
//! decodes; a damaged file is one error line naming the file and the tensor.

use std::path::{Path, PathBuf};

use fastvideo_gguf::{GgmlType, GgufFile};
use tch::Tensor;

use crate::single_file::{frames, generate_with_noise_of};

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(rel)
}

/// tiny-wan's folder with the fixture's width-128 transformer config and no transformer weights
/// (the file brings them).
fn folder(root: &Path) -> PathBuf {
    let model = root.join("model");
    crate::common::copy_dir(&fixture("tiny-wan"), &model);
    std::fs::remove_file(model.join("transformer/diffusion_pytorch_model.safetensors")).unwrap();
    std::fs::copy(fixture("gguf/transformer_config.json"), model.join("transformer/config.json")).unwrap();
    model
}

/// float32 on both sides, the blocks decoded the same way (gguf-py in the fixture, ours here):
/// half an 8-bit step of rounding plus 1e-3, as for the safetensors single files.
#[test]
fn a_gguf_transformer_makes_the_pipelines_frames() {
    let dir = tempfile::tempdir().unwrap();
    let model = folder(dir.path());
    let r =
        generate_with_noise_of("gguf/outputs.safetensors", &model, &fixture("gguf/wan_mixed.gguf"), dir.path(), &[]);
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{stderr}");
    assert!(stderr.contains("with quantized_weights"), "the load report names the lossy format: {stderr}");
    assert!(
        stderr.contains("weights: GGUF Q4_0 ×2, Q4_1 ×2, Q4_K ×4, Q5_0 ×2, Q5_1 ×2, Q5_K ×2, Q6_K ×4, Q8_0 ×2, dequantized per layer"),
        "{stderr}"
    );
    let want = Tensor::read_safetensors(fixture("gguf/outputs.safetensors")).unwrap();
    let video = want.iter().find(|(k, _)| k == "video").unwrap().1.get(0).permute([0, 2, 3, 1]);
    let e = (frames(dir.path()) - &video).abs().max().double_value(&[]);
    assert!(e < 0.5 / 255.0 + 1e-3, "{e:.2e}");
}

#[test]
fn a_damaged_gguf_file_is_refused_naming_the_file_and_the_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let model = folder(d);
    let bytes = std::fs::read(fixture("gguf/wan_mixed.gguf")).unwrap();
    let parsed = GgufFile::parse(&bytes).unwrap();
    let last = parsed.tensors.iter().max_by_key(|t| t.end).unwrap();
    let q8 = parsed.tensors.iter().find(|t| t.ty == GgmlType::Q8_0).unwrap();
    let mut nan = bytes.clone();
    nan[q8.start + 34..q8.start + 36].copy_from_slice(&0x7e00u16.to_le_bytes());
    // The type id of the first tensor record: 4 bytes after its dims.
    let first = &parsed.tensors[0];
    let name = first.name.as_bytes();
    let rec = (0..bytes.len())
        .find(|&i| bytes[i..].starts_with(name) && bytes[i - 8..i] == (name.len() as u64).to_le_bytes())
        .unwrap();
    let type_at = rec + name.len() + 4 + 8 * first.dims.len();
    let mut unknown = bytes.clone();
    unknown[type_at..type_at + 4].copy_from_slice(&77u32.to_le_bytes());
    let cases: Vec<(&str, Vec<u8>, String)> = vec![
        ("truncated.gguf", bytes[..bytes.len() - 100].to_vec(), format!("tensor `{}`", last.name)),
        ("nan.gguf", nan, format!("tensor `{}` (Q8_0) has a NaN or infinite scale in block 1", q8.name)),
        ("unknown.gguf", unknown, format!("tensor `{}`: unknown tensor type id 77", first.name)),
    ];
    for (i, (file, data, want)) in cases.into_iter().enumerate() {
        let path = d.join(file);
        std::fs::write(&path, data).unwrap();
        let r = generate_with_noise_of("gguf/outputs.safetensors", &model, &path, &d.join(format!("out{i}")), &[]);
        crate::common::assert_user_error(&r, &want);
        assert!(String::from_utf8_lossy(&r.stderr).contains(file), "names the file");
    }
    // A GGUF file of another model: its first key is refused, as for safetensors files.
    let r = generate_with_noise_of("gguf/outputs.safetensors", &model, &fixture("gguf/types.gguf"), &d.join("t"), &[]);
    crate::common::assert_user_error(&r, "`BF16` is not a tensor of a Wan transformer");
}

/// A server on a GGUF transformer says so in `/v1/models` (the lossy format and path), and an
/// `exact` request is refused there, since the file's blocks are not the float weights.
#[test]
fn a_served_gguf_model_reports_its_format() {
    let dir = tempfile::tempdir().unwrap();
    let model = folder(dir.path());
    let file = fixture("gguf/wan_mixed.gguf");
    let server = crate::common::server::Server::start(&[
        "--model",
        model.to_str().unwrap(),
        "--transformer",
        file.to_str().unwrap(),
        "--dtype",
        "fp32",
    ]);
    let (status, models) = server.get("/v1/models");
    assert_eq!(status, 200);
    let m = &models["data"][0];
    assert!(m["quantized_weights"].as_str().unwrap().starts_with("GGUF Q4_0 ×2"), "{m}");
    assert!(m["lossy_paths"].as_array().unwrap().iter().any(|p| p == "quantized_weights"), "{m}");
    let (status, body) = server.post(
        "/v1/videos",
        serde_json::json!({"prompt": "a red circle", "exact": true, "num_frames": 5, "height": 32, "width": 32}),
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("quantized_weights"), "{body}");
}
