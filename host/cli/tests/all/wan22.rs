//! `fastvideo generate` on the tiny Wan 2.2 two-expert folders as a user runs it: the expert
//! flags reach the run (`--boundary-ratio`, `--guidance-2`), the same flags give the same video,
//! and bad values or a one-expert model give one clear line naming the field.

use std::path::Path;
use std::process::{Command, Output};

use crate::common::assert_user_error;

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name).display().to_string()
}

fn generate(model: &str, extra: &[&str], out: &Path) -> Output {
    let mut args = vec!["generate", "--model", model, "--prompt", "a red circle moving left", "--seed", "3"];
    args.extend(["--height", "32", "--width", "32", "--frames", "9", "--steps", "4", "--quiet"]);
    args.extend(["--out", out.to_str().unwrap()]);
    args.extend(extra);
    Command::new(env!("CARGO_BIN_EXE_fastvideo")).args(&args).output().expect("binary runs")
}

fn video(model: &str, extra: &[&str]) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("v.mp4");
    let r = generate(model, extra, &out);
    assert!(r.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&r.stderr));
    std::fs::read(&out).unwrap()
}

#[test]
fn the_expert_flags_reach_the_run() {
    let m = fixture("tiny-wan22-t2v");
    let base = video(&m, &["--guidance", "4", "--guidance-2", "3"]);
    assert_eq!(base, video(&m, &["--guidance", "4", "--guidance-2", "3"]), "the same flags, the same video");
    // The folder's boundary is 0.875; 0.5 keeps the high-noise expert for more steps.
    assert_ne!(base, video(&m, &["--guidance", "4", "--guidance-2", "3", "--boundary-ratio", "0.5"]));
    assert_ne!(base, video(&m, &["--guidance", "4", "--guidance-2", "1.5"]));
}

#[test]
fn bad_expert_values_and_one_expert_models_name_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("v.mp4");
    let r = generate(&fixture("tiny-wan22-t2v"), &["--boundary-ratio", "1.5"], &out);
    assert_user_error(&r, "diffusion.boundary_ratio");
    let r = generate(&fixture("tiny-wan"), &["--guidance-2", "3"], &out);
    assert_user_error(&r, "diffusion.guidance_scale_2");
    assert!(!out.exists(), "nothing is written for a refused request");
}

/// A 32x32 PNG (blue-green with a red channel of 20) at `path`.
fn write_png(path: &Path) {
    let mut rgb = vec![200u8; 32 * 32 * 3];
    rgb.iter_mut().step_by(3).for_each(|r| *r = 20);
    let file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut enc = png::Encoder::new(file, 32, 32);
    enc.set_color(png::ColorType::Rgb);
    enc.write_header().unwrap().write_image_data(&rgb).unwrap();
}

#[test]
fn the_two_expert_image_model_generates_from_a_picture() {
    let dir = tempfile::tempdir().unwrap();
    let (png, out) = (dir.path().join("first.png"), dir.path().join("v.mp4"));
    write_png(&png);
    let r = generate(&fixture("tiny-wan22-i2v"), &["--image", png.to_str().unwrap()], &out);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(std::fs::metadata(&out).unwrap().len() > 0);
}

#[test]
fn the_ti2v_model_takes_text_alone_or_text_and_a_picture() {
    // Sides are multiples of 32 on TI2V (its VAE is 16x, the transformer's patch 2x).
    let m = fixture("tiny-wan22-ti2v");
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("first.png");
    write_png(&png);
    let text = video(&m, &[]);
    let image = video(&m, &["--image", png.to_str().unwrap()]);
    assert_ne!(text, image, "the picture conditions the video");
    let args = ["generate", "--model", &m, "--prompt", "a red circle", "--height", "48", "--width", "32", "--quiet"];
    let r = Command::new(env!("CARGO_BIN_EXE_fastvideo")).args(args).output().unwrap();
    assert_user_error(&r, "diffusion.height");
}
