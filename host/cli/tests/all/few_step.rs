//! Few-step schedules end to end: `--timesteps` (a distilled model's list) makes the frames
//! diffusers' pipeline makes on that list (tests/fixtures/make_few_step_fixtures.py), a model's
//! `fastvideo.json` list and sampler apply without flags, the `dmd` sampler's fresh noise comes
//! from the seed, and a bad list is one error line naming the field.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tch::Tensor;

use crate::single_file::frames;

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(rel)
}

/// `generate` on `model` with the fixture case's settings (32x32, 9 frames, guidance 5, fp32
/// CPU, the fixture's latents) and `extra` flags; frames in `dir/frames`.
pub(crate) fn generate(model: &Path, dir: &Path, extra: &[&str]) -> Output {
    generate_from("few_step_outputs.safetensors", model, dir, &[&["--guidance", "5"], extra].concat())
}

/// [`generate`] with the `latents` of fixture file `outputs`, the guidance left to `extra`.
fn generate_from(outputs: &str, model: &Path, dir: &Path, extra: &[&str]) -> Output {
    std::fs::create_dir_all(dir).unwrap();
    let f = Tensor::read_safetensors(fixture(outputs)).unwrap();
    let latents = &f.iter().find(|(k, _)| k == "latents").unwrap().1;
    let noise = dir.join("noise.safetensors");
    Tensor::write_safetensors(&[("latents", latents)], &noise).unwrap();
    Command::new(env!("CARGO_BIN_EXE_fastvideo"))
        .args(["generate", "--model"])
        .arg(model)
        .args(["--prompt", "a red circle moving left on a white background", "--negative-prompt", "blurry low quality"])
        .args(["--height", "32", "--width", "32", "--frames", "9", "--device", "cpu", "--dtype", "fp32"])
        .arg("--noise")
        .arg(&noise)
        .arg("--frames-dir")
        .arg(dir.join("frames"))
        .arg("--out")
        .arg(dir.join("out.mp4"))
        .args(extra)
        .output()
        .unwrap()
}

fn ok(r: &Output) {
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
}

/// float32 on both sides: half an 8-bit step of rounding plus 1e-3, as the other pipeline tests.
#[test]
fn an_explicit_schedule_makes_the_pipelines_frames_and_a_models_list_applies_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let want = Tensor::read_safetensors(fixture("few_step_outputs.safetensors")).unwrap();
    let video = want.iter().find(|(k, _)| k == "video").unwrap().1.get(0).permute([0, 2, 3, 1]);
    let tiny = fixture("tiny-wan");
    let list = ["--timesteps", "1000,750,500,250", "--sampler", "euler", "--shift", "5"];
    let r = generate(&tiny, &d.join("a"), &list);
    ok(&r);
    let e = (frames(&d.join("a")) - &video).abs().max().double_value(&[]);
    assert!(e < 0.5 / 255.0 + 1e-3, "{e:.2e}");
    // The same schedule as noise levels.
    let r = generate(&tiny, &d.join("b"), &["--sigmas", "1,0.75,0.5,0.25", "--sampler", "euler", "--shift", "5"]);
    ok(&r);
    assert_eq!(
        Vec::<f32>::try_from(frames(&d.join("b")).flatten(0, -1)).unwrap(),
        Vec::<f32>::try_from(frames(&d.join("a")).flatten(0, -1)).unwrap()
    );
    // 4 evenly spaced steps are another schedule.
    ok(&generate(&tiny, &d.join("c"), &["--steps", "4", "--sampler", "euler", "--shift", "5"]));
    assert!((frames(&d.join("c")) - &video).abs().max().double_value(&[]) > 0.02, "the list changes the frames");
    // A distilled folder: its fastvideo.json carries the list and the sampler.
    let model = d.join("distilled");
    crate::common::copy_dir(&tiny, &model);
    std::fs::write(model.join("fastvideo.json"), r#"{"timesteps": [1000, 750, 500, 250], "sampler": "euler"}"#)
        .unwrap();
    ok(&generate(&model, &d.join("e"), &["--shift", "5"]));
    let e = (frames(&d.join("e")) - &video).abs().max().double_value(&[]);
    assert!(e < 0.5 / 255.0 + 1e-3, "the model's list: {e:.2e}");
}

/// LightX2V's Wan 2.2 recipe (Wan2.2-Lightning): a LoRA file per expert in LightX2V's layout,
/// 4 steps on the list at shift 5, guidance 1 on both experts, the switch after two steps (the
/// folder's boundary 0.875 falls between 937.5 and 833.3). Same frames as diffusers' pipeline
/// with each file loaded into its expert; tolerance as above.
#[test]
fn lightx2vs_two_expert_distillation_loras_run_their_recipe() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (high, low) =
        (fixture("few_step_lightning/high_noise.safetensors"), fixture("few_step_lightning/low_noise.safetensors"));
    let lora = |f: &Path, expert: &str| format!("{}=1@{expert}", f.display());
    let (high, low) = (lora(&high, "high_noise"), lora(&low, "low_noise"));
    let args = [
        "--lora",
        &high,
        "--lora",
        &low,
        "--timesteps",
        "1000,750,500,250",
        "--shift",
        "5",
        "--guidance",
        "1",
        "--guidance-2",
        "1",
        "--sampler",
        "euler",
    ];
    let r = generate_from("few_step_lightning/outputs.safetensors", &fixture("tiny-wan22-t2v"), d, &args);
    ok(&r);
    let want = Tensor::read_safetensors(fixture("few_step_lightning/outputs.safetensors")).unwrap();
    let video = want.iter().find(|(k, _)| k == "video").unwrap().1.get(0).permute([0, 2, 3, 1]);
    let e = (frames(d) - &video).abs().max().double_value(&[]);
    assert!(e < 0.5 / 255.0 + 1e-3, "{e:.2e}");
}

/// The `dmd` sampler draws each step's fresh noise from the seed: the same seed makes the same
/// frames, another seed other frames (the initial latents are the same file in all three).
#[test]
fn the_dmd_samplers_noise_follows_the_seed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let run = |sub: &str, seed: &str| {
        let args = ["--timesteps", "1000,750,500,250", "--sampler", "dmd", "--shift", "5", "--seed", seed];
        ok(&generate(&fixture("tiny-wan"), &d.join(sub), &args));
        frames(&d.join(sub))
    };
    let (a, b, c) = (run("a", "7"), run("b", "7"), run("c", "8"));
    assert_eq!((&a - &b).abs().max().double_value(&[]), 0.0);
    assert!((&a - &c).abs().max().double_value(&[]) > 0.01, "another seed renoises differently");
}

#[test]
fn a_bad_schedule_is_one_error_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let tiny = fixture("tiny-wan");
    for (args, want) in [
        (&["--timesteps", "1000,1000"][..], "diffusion.timesteps[1]"),
        (&["--timesteps", "0,500"][..], "diffusion.timesteps[0]"),
        (&["--timesteps", "1000,500", "--steps", "3"][..], "disagrees with the 2 entries of diffusion.timesteps"),
        (&["--sigmas", "1.5"][..], "diffusion.sigmas[0]: 1.5 is outside (0, 1]"),
    ] {
        crate::common::assert_user_error(&generate(&tiny, &d.join("x"), args), want);
    }
}
