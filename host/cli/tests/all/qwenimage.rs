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

/// A deploy's adapter by hash on a served Qwen-Image model: a request naming it and one without,
/// sent together (so the engine packs them into one forward), each make the picture
/// `generate` makes alone with and without `--lora`; an unknown name is a 400 naming the field.
#[test]
fn served_requests_with_and_without_an_adapter_match_generate() {
    use base64::Engine as _;
    let dir = tempfile::tempdir().unwrap();
    let m = fixture("tiny-qwenimage").display().to_string();
    let file = fixture("image_lora/qwenimage_lightning.safetensors");
    let hash = blake3::hash(&std::fs::read(&file).unwrap()).to_hex().to_string();
    let deploy = dir.path().join("deploy.toml");
    let text = format!("[[adapters]]\nname = \"lightning\"\nsource = \"{}\"\nblake3 = \"{hash}\"\n", file.display());
    std::fs::write(&deploy, text).unwrap();
    let server = crate::common::server::Server::start(&["--model", &m, "--deploy", deploy.to_str().unwrap()]);
    let body = |lora: bool| {
        let mut b = serde_json::json!({"prompt": "a red fox", "size": "48x32", "num_inference_steps": 3, "seed": 5});
        if lora {
            b["lora"] = serde_json::json!([{"name": "lightning", "scale": 0.7}]);
        }
        b
    };
    let picture = |v: &serde_json::Value| {
        let b64 = v["data"][0]["b64_json"].as_str().unwrap_or_else(|| panic!("{v}"));
        let png = base64::engine::general_purpose::STANDARD.decode(b64).unwrap();
        let img = image::load_from_memory(&png).unwrap().to_rgb8();
        Tensor::from_slice(img.as_raw()).view([32, 48, 3]).to_kind(Kind::Float) / 255.0
    };
    let (styled, plain) = std::thread::scope(|s| {
        let a = s.spawn(|| server.post("/v1/images/generations", body(true)));
        let b = s.spawn(|| server.post("/v1/images/generations", body(false)));
        (a.join().unwrap(), b.join().unwrap())
    });
    assert_eq!((styled.0, plain.0), (200, 200), "{} {}", styled.1, plain.1);
    let lora = format!("{}=0.7", file.display());
    for (served, extra) in [(&styled.1, vec!["--lora", lora.as_str()]), (&plain.1, vec![])] {
        let out = dir.path().join("alone.png");
        let mut args = vec!["generate", "--model", &m, "--prompt", "a red fox", "--steps", "3", "--height", "32"];
        args.extend(["--width", "48", "--seed", "5", "--device", "cpu", "--out", out.to_str().unwrap()]);
        args.extend(extra);
        let r = Command::new(env!("CARGO_BIN_EXE_fastvideo")).args(&args).output().unwrap();
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        let img = image::open(&out).unwrap().to_rgb8();
        let alone = Tensor::from_slice(img.as_raw()).view([32, 48, 3]).to_kind(Kind::Float) / 255.0;
        // Packed with another request vs alone: float32 rounding, at most one 8-bit step.
        let e = (picture(served) - alone).abs().max().double_value(&[]);
        assert!(e <= 1.0 / 255.0 + 1e-6, "served vs generate: {e:.2e}");
    }
    assert!((picture(&styled.1) - picture(&plain.1)).abs().max().double_value(&[]) > 0.05);
    let mut wrong = body(true);
    wrong["lora"][0]["name"] = "other".into();
    let (status, e) = server.post("/v1/images/generations", wrong);
    assert_eq!((status, e["error"]["param"].as_str()), (400, Some("lora[0].name")), "{e}");
}

/// `--transformer FILE` on a Qwen-Image folder (tests/fixtures/make_image_single_file_fixtures.py:
/// the transformer's weights moved, as ComfyUI's safetensors under `model.diffusion_model.` and
/// as a Q8_0 GGUF): the picture diffusers' pipeline makes with each file's weights (the GGUF's
/// as gguf-py decodes them), within half an 8-bit step plus 1e-3.
#[test]
fn a_single_file_transformer_makes_the_pipelines_picture() {
    let dir = tempfile::tempdir().unwrap();
    let f: std::collections::HashMap<String, Tensor> =
        Tensor::read_safetensors(fixture("qwenimage/single_file_outputs.safetensors")).unwrap().into_iter().collect();
    let noise = dir.path().join("noise.safetensors");
    Tensor::write_safetensors(&[("latents", &f["latents"])], &noise).unwrap();
    for (file, image, format) in [
        ("qwenimage/single_file_comfy.safetensors", "image_comfy", None),
        ("qwenimage/single_file_q8_0.gguf", "image_gguf", Some("weights: GGUF Q8_0 ×")),
    ] {
        let out = dir.path().join("out.png");
        let r = Command::new(env!("CARGO_BIN_EXE_fastvideo"))
            .args(["generate", "--model"])
            .arg(fixture("tiny-qwenimage"))
            .arg("--transformer")
            .arg(fixture(file))
            .args(["--prompt", "a red fox jumps over the lazy dog", "--negative-prompt", "blurry, low quality"])
            .args(["--steps", "3", "--guidance", "4", "--height", "32", "--width", "48", "--device", "cpu"])
            .args(["--dtype", "fp32", "--noise"])
            .arg(&noise)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&r.stderr);
        assert!(r.status.success(), "{file}: {stderr}");
        if let Some(format) = format {
            assert!(stderr.contains(format), "{file}: {stderr}");
        }
        let img = image::open(&out).unwrap().to_rgb8();
        let ours = Tensor::from_slice(img.as_raw()).view([32, 48, 3]).to_kind(Kind::Float) / 255.0;
        let e = (ours - &f[image]).abs().max().double_value(&[]);
        assert!(e < 0.5 / 255.0 + 1e-3, "{file}: {e:.2e}");
    }
}
