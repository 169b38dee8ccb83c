//! A Qwen-Image folder (the tiny random one in tests/fixtures) through `fastvideo generate` as
//! users run it: the PNG diffusers' `QwenImagePipeline` makes from the same `--noise`, with true
//! CFG (`--guidance` is `true_cfg_scale`, run with `--negative-prompt`) and without.

use std::path::{Path, PathBuf};
use std::process::Command;

use tch::{Kind, Tensor};

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(rel)
}

/// With and without true CFG, and with a Lightning-style LoRA at 0.7 (diffusers'
/// `load_lora_weights` + `set_adapters`).
#[test]
fn generate_matches_diffusers_with_and_without_a_negative_prompt() {
    let dir = tempfile::tempdir().unwrap();
    let m = fixture("tiny-qwenimage").display().to_string();
    let lora = format!("{}=0.7", fixture("image_lora/qwenimage_lightning.safetensors").display());
    for (case, negative, lora) in [
        ("qwenimage/t2i.safetensors", Some("blurry, low quality"), None),
        ("qwenimage/t2i_nocfg.safetensors", None, None),
        ("image_lora/qwenimage_t2i.safetensors", Some("blurry, low quality"), Some(lora.as_str())),
    ] {
        let f: std::collections::HashMap<String, Tensor> =
            Tensor::read_safetensors(fixture(case)).unwrap().into_iter().collect();
        let noise = dir.path().join("noise.safetensors");
        Tensor::write_safetensors(&[("latents", &f["latents"])], &noise).unwrap();
        let out = dir.path().join("out.png");
        let mut args: Vec<String> = [
            "generate",
            "--model",
            &m,
            "--prompt",
            "a red fox jumps over the lazy dog",
            "--steps",
            "3",
            "--guidance",
            "4",
            "--height",
            "32",
            "--width",
            "48",
            "--seed",
            "0",
            "--device",
            "cpu",
            "--dtype",
            "fp32",
        ]
        .map(String::from)
        .into();
        args.extend(["--noise".into(), noise.display().to_string(), "--out".into(), out.display().to_string()]);
        if let Some(n) = negative {
            args.extend(["--negative-prompt".into(), n.into()]);
        }
        if let Some(l) = lora {
            args.extend(["--lora".into(), l.into()]);
        }
        let r = Command::new(env!("CARGO_BIN_EXE_fastvideo")).args(&args).output().unwrap();
        assert!(r.status.success(), "{case}: {}", String::from_utf8_lossy(&r.stderr));
        let img = image::open(&out).unwrap().to_rgb8();
        let ours = Tensor::from_slice(img.as_raw()).view([32, 48, 3]).to_kind(Kind::Float) / 255.0;
        let e = (ours - &f["image"]).abs().max().double_value(&[]);
        // Half an 8-bit step (rounding) plus the pipeline's 1e-4.
        assert!(e < 0.5 / 255.0 + 1e-3, "{case}: {e:.2e}");
    }
}

/// Qwen-Image-Edit-Plus through `generate` with two `--image` pictures: the pipeline's picture;
/// without a picture, one line saying what the model needs.
#[test]
fn generate_edits_with_two_pictures_as_the_edit_plus_pipeline() {
    let dir = tempfile::tempdir().unwrap();
    let m = fixture("tiny-qwenimage-edit").display().to_string();
    let f: std::collections::HashMap<String, Tensor> =
        Tensor::read_safetensors(fixture("qwenimage/edit_plus.safetensors")).unwrap().into_iter().collect();
    let noise = dir.path().join("noise.safetensors");
    Tensor::write_safetensors(&[("latents", &f["latents"])], &noise).unwrap();
    let out = dir.path().join("edit.png");
    let pics = ["edit0.png", "edit1.png"].map(|p| fixture(&format!("qwenimage/{p}")).display().to_string());
    let common = ["generate", "--model", &m, "--prompt", "a red fox jumps over the lazy dog", "--steps", "2"];
    let args: Vec<&str> = [
        &common[..],
        &["--guidance", "4", "--negative-prompt", "blurry, low quality", "--height", "32", "--width", "48"],
        &["--device", "cpu", "--dtype", "fp32", "--noise", noise.to_str().unwrap(), "--out", out.to_str().unwrap()],
        &["--image", &pics[0], "--image", &pics[1]],
    ]
    .concat();
    let r = Command::new(env!("CARGO_BIN_EXE_fastvideo")).args(&args).output().unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let img = image::open(&out).unwrap().to_rgb8();
    let ours = Tensor::from_slice(img.as_raw()).view([32, 48, 3]).to_kind(Kind::Float) / 255.0;
    let e = (ours - &f["image"]).abs().max().double_value(&[]);
    assert!(e < 0.5 / 255.0 + 1e-3, "edit: {e:.2e}");
    let r = Command::new(env!("CARGO_BIN_EXE_fastvideo"))
        .args(common)
        .args(["--out", out.to_str().unwrap()])
        .output()
        .unwrap();
    crate::common::assert_user_error(&r, "is an editing model: give the picture(s) to edit with --image");
}
