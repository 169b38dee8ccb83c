//! A FLUX.2 [klein] folder (the tiny random one in tests/fixtures) through the `fastvideo`
//! binary as users run it: `generate` writes the PNG diffusers' `Flux2KleinPipeline` makes from
//! the same `--noise` (text to image, and an edit with two `--image` references); `serve`
//! answers the official `openai` client's `images.generate(n=2)` and `images.edit` with two
//! references; bad input is one line or a 400 naming the field.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use tch::{Kind, Tensor};

use crate::common::server::Server;

fn fastvideo(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fastvideo")).args(args).env("RUST_BACKTRACE", "1").output().expect("binary runs")
}

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(rel)
}

fn model() -> String {
    fixture("tiny-flux2-klein").display().to_string()
}

/// A PNG as `[H, W, 3]` in [0, 1].
fn png(path: &Path) -> Tensor {
    let img = image::open(path).unwrap().to_rgb8();
    let (w, h) = img.dimensions();
    Tensor::from_slice(img.as_raw()).view([h as i64, w as i64, 3]).to_kind(Kind::Float) / 255.0
}

/// The `latents` of a fixture as a --noise file.
fn noise_file(dir: &Path, fixture_file: &str) -> PathBuf {
    let f: std::collections::HashMap<String, Tensor> =
        Tensor::read_safetensors(fixture(fixture_file)).unwrap().into_iter().collect();
    let path = dir.join("noise.safetensors");
    Tensor::write_safetensors(&[("latents", &f["latents"])], &path).unwrap();
    path
}

fn reference_image(fixture_file: &str) -> Tensor {
    let f: std::collections::HashMap<String, Tensor> =
        Tensor::read_safetensors(fixture(fixture_file)).unwrap().into_iter().collect();
    f["image"].shallow_clone()
}

/// float32 on both sides: half an 8-bit step (rounding) plus the pipeline's 1e-4.
const PICTURE_TOL: f64 = 0.5 / 255.0 + 1e-3;

/// Text to image, an edit with two references, and text to image with a BFL-format LoRA at 0.7
/// (diffusers' `load_lora_weights` + `set_adapters`).
#[test]
fn generate_matches_diffusers_for_text_to_image_and_a_two_reference_edit() {
    let dir = tempfile::tempdir().unwrap();
    let m = model();
    let lora = format!("{}=0.7", fixture("image_lora/flux2_bfl.safetensors").display());
    for (case, refs, lora) in [
        ("flux2/t2i.safetensors", vec![], None),
        ("flux2/edit.safetensors", vec!["ref0.png", "ref1.png"], None),
        ("image_lora/flux2_t2i.safetensors", vec![], Some(lora.as_str())),
    ] {
        let noise = noise_file(dir.path(), case);
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
        for r in refs {
            args.extend(["--image".into(), fixture(&format!("flux2/{r}")).display().to_string()]);
        }
        if let Some(l) = lora {
            args.extend(["--lora".into(), l.into()]);
        }
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let r = fastvideo(&argv);
        assert!(r.status.success(), "{case}: {}", String::from_utf8_lossy(&r.stderr));
        let e = (png(&out) - reference_image(case)).abs().max().double_value(&[]);
        assert!(e < PICTURE_TOL, "{case}: {e:.2e}");
    }
}

#[test]
fn bad_input_is_one_line_naming_the_field() {
    let m = model();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.png");
    let o = out.to_str().unwrap();
    let r0 = fixture("flux2/ref0.png").display().to_string();
    let five: Vec<&str> = (0..5).flat_map(|_| ["--image", r0.as_str()]).collect();
    let mp4 = dir.path().join("x.mp4");
    let cases: [(Vec<&str>, &str); 4] = [
        (vec!["--height", "36"], "diffusion.height: 36"),
        (vec!["--frames", "5"], "diffusion.num_frames"),
        (five, "at most 4"),
        (vec!["--out", mp4.to_str().unwrap()], "--out"),
    ];
    for (extra, want) in cases {
        let mut args = vec!["generate", "--model", &m, "--prompt", "p", "--steps", "1", "--out", o];
        args.extend(extra);
        let r = fastvideo(&args);
        crate::common::assert_user_error(&r, want);
    }
}

#[test]
fn the_official_openai_client_generates_two_pictures_and_edits_with_two_references() {
    let m = model();
    let server = Server::start(&["--model", &m]);
    let dir = tempfile::tempdir().unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/clients/openai_images.py");
    let out = Command::new(crate::common::client_python())
        .arg(script)
        .arg(&server.base)
        .arg(fixture("flux2/ref0.png"))
        .arg(fixture("flux2/ref1.png"))
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let generated: Vec<PathBuf> =
        r["generated"].as_array().unwrap().iter().map(|p| p.as_str().unwrap().into()).collect();
    assert_eq!(generated.len(), 2);
    let (a, b) = (png(&generated[0]), png(&generated[1]));
    assert_eq!(a.size(), [32, 48, 3]);
    assert!((&a - &b).abs().max().double_value(&[]) > 0.05, "siblings take their own seeds");
    let edited = png(Path::new(r["edited"].as_str().unwrap()));
    assert_eq!(edited.size(), [32, 48, 3]);
    assert!((&edited - &a).abs().max().double_value(&[]) > 0.05, "the references change the picture");
    assert_eq!(r["mask"]["status"], 400);
    assert_eq!(r["mask"]["param"], "mask");
}
