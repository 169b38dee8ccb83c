//! The `fastvideo` binary as a user runs it: the default generation writes a real MP4, and bad
//! input gives one clear line and a non-zero exit, never a panic.

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::assert_user_error;

fn fastvideo(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fastvideo")).args(args).env("RUST_BACKTRACE", "1").output().expect("binary runs")
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn default_model_writes_a_playable_mp4_with_the_requested_shape() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("clip.mp4");
    let frames = dir.path().join("frames");
    let r = fastvideo(&[
        "generate",
        "--prompt",
        "a red circle moving left",
        "--frames",
        "9",
        "--height",
        "32",
        "--width",
        "48",
        "--steps",
        "3",
        "--seed",
        "7",
        "--out",
        out.to_str().unwrap(),
        "--frames-dir",
        frames.to_str().unwrap(),
        "--json",
    ]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{err}");
    assert!(err.contains("trained by this project"), "the CLI names the shipped model: {err}");
    assert!(!err.contains("does not know"), "every word of this prompt is known: {err}");
    let json: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(json["metrics"]["seed"], 7);
    assert_eq!(json["metrics"]["step_seconds"].as_array().unwrap().len(), 3);
    let bytes = std::fs::read(&out).unwrap();
    let size = bytes.len() as u64;
    let reader = mp4::Mp4Reader::read_header(Cursor::new(bytes), size).unwrap();
    let (&id, track) = reader.tracks().iter().next().unwrap();
    assert_eq!((track.width(), track.height()), (48, 32));
    assert_eq!(reader.sample_count(id).unwrap(), 9);
    assert_eq!(std::fs::read_dir(&frames).unwrap().count(), 9);
}

#[test]
fn words_the_text_encoder_does_not_know_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("clip.mp4");
    let r = fastvideo(&[
        "generate",
        "--prompt",
        "a crimson disc gliding left",
        "--frames",
        "5",
        "--height",
        "32",
        "--width",
        "32",
        "--steps",
        "1",
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{err}");
    assert!(err.contains("does not know these words: crimson, disc, gliding"), "{err}");
}

#[test]
fn same_seed_same_video() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.mp4");
    let b = dir.path().join("b.mp4");
    for p in [&a, &b] {
        let r = fastvideo(&[
            "generate",
            "--prompt",
            "a blue square",
            "--steps",
            "2",
            "--seed",
            "3",
            "--quiet",
            "--out",
            p.to_str().unwrap(),
        ]);
        assert!(r.status.success());
    }
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
}

#[test]
fn bad_request_values_name_the_field() {
    let out = "/tmp/fastvideo-never-written.mp4";
    assert_user_error(
        &fastvideo(&["generate", "--prompt", "x", "--frames", "16", "--out", out]),
        "diffusion.num_frames: 16: Wan needs frames = 4k+1",
    );
    assert_user_error(&fastvideo(&["generate", "--prompt", "x", "--width", "70", "--out", out]), "diffusion.width");
    assert_user_error(&fastvideo(&["generate", "--prompt", "  ", "--out", out]), "prompt: must not be empty");
    assert_user_error(
        &fastvideo(&["generate", "--prompt", "x", "--out", "/no/such/dir/x.mp4"]),
        "--out: folder /no/such/dir does not exist",
    );
    assert!(!Path::new(out).exists());
}

#[test]
fn audio_out_needs_a_model_with_sound_and_a_place_to_go() {
    let (out, wav) = ("/tmp/fastvideo-never-written-a.mp4", "/tmp/fastvideo-never-written.wav");
    // The default model makes no sound: refused before generating, naming the flag.
    assert_user_error(
        &fastvideo(&["generate", "--prompt", "x", "--steps", "1", "--out", out, "--audio-out", wav]),
        "--audio-out: ",
    );
    let r = fastvideo(&["generate", "--prompt", "x", "--out", out, "--audio-out", wav]);
    assert!(String::from_utf8_lossy(&r.stderr).contains("makes no sound"));
    assert_user_error(
        &fastvideo(&["generate", "--prompt", "x", "--out", out, "--audio-out", "/no/such/dir/x.wav"]),
        "--audio-out: folder /no/such/dir does not exist",
    );
    assert!(!Path::new(out).exists() && !Path::new(wav).exists());
}

#[test]
fn presets_say_what_they_run() {
    // `fast` on a generation model takes the 8-bit attention recipe its gate admitted where a GPU
    // runs it, not on a CPU (where the quantized function is emulated, slower than plain
    // attention); named, a recipe runs on a CPU too.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("f.mp4");
    let run = |extra: &[&str]| {
        let args = ["generate", "--prompt", "a red circle moving left", "--steps", "2", "--out", out.to_str().unwrap()];
        let o = fastvideo(&[&args[..], extra].concat());
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let fast = run(&["--precision", "fast", "--device", "cpu"]);
    assert!(fast.contains("precision fast:"), "{fast}");
    assert!(run(&["--precision", "fast", "--int8-attention"]).contains("precision fast with int8_attention:"));
    assert!(run(&["--precision", "fast", "--int8-qk-attention"]).contains("precision fast with int8_qk_attention:"));
    assert!(run(&["--precision", "bf16"]).contains("precision bf16:"));
    let never = "/tmp/fastvideo-never-written.mp4";
    assert_user_error(
        &fastvideo(&["generate", "--prompt", "x", "--precision", "exact", "--int8-qk-attention", "--out", never]),
        "int8_qk_attention with precision = exact",
    );
    let both = fastvideo(&["generate", "--prompt", "x", "--int8-attention", "--int8-qk-attention", "--out", never]);
    assert!(!both.status.success() && String::from_utf8_lossy(&both.stderr).contains("cannot be used with"));
}

#[test]
fn missing_and_corrupt_models_are_named() {
    assert_user_error(
        &fastvideo(&["generate", "--prompt", "x", "--model", "/no/such/model"]),
        "model folder /no/such/model does not exist",
    );
    let dir = tempfile::tempdir().unwrap();
    assert_user_error(
        &fastvideo(&["generate", "--prompt", "x", "--model", dir.path().to_str().unwrap()]),
        "is not a diffusers model folder",
    );

    let tiny = repo().join("tests/fixtures/tiny-wan");
    let corrupt = dir.path().join("corrupt");
    crate::common::copy_dir(&tiny, &corrupt);
    let weights = corrupt.join("transformer/diffusion_pytorch_model.safetensors");
    let bytes = std::fs::read(&weights).unwrap();
    std::fs::write(&weights, &bytes[..bytes.len() / 2]).unwrap();
    assert_user_error(
        &fastvideo(&["generate", "--prompt", "x", "--model", corrupt.to_str().unwrap()]),
        "diffusion_pytorch_model.safetensors: not a readable safetensors file",
    );

    let unknown = dir.path().join("unknown");
    crate::common::copy_dir(&tiny, &unknown);
    let cfg = unknown.join("transformer/config.json");
    let text = std::fs::read_to_string(&cfg).unwrap().replacen('{', "{\n  \"sliding_window\": 4,", 1);
    std::fs::write(&cfg, text).unwrap();
    assert_user_error(
        &fastvideo(&["generate", "--prompt", "x", "--model", unknown.to_str().unwrap()]),
        "unsupported config key `sliding_window`",
    );

    // A folder of an architecture no family serves: one line naming it and the supported ones,
    // before any weights are read (the folder has none).
    let other = dir.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("model_index.json"), r#"{"_class_name": "FluxPipeline"}"#).unwrap();
    assert_user_error(
        &fastvideo(&["generate", "--prompt", "x", "--model", other.to_str().unwrap()]),
        "architecture `FluxPipeline` (model_index.json) is not served; supported as a generation model (--model): \
         WanPipeline (wan), WanImageToVideoPipeline (wan), WanVideoToVideoPipeline (wan)",
    );
    // A language model where a generation model goes says what it is.
    let lm = repo().join("tests/fixtures/tiny-qwen3");
    assert_user_error(
        &fastvideo(&["generate", "--prompt", "x", "--model", lm.to_str().unwrap()]),
        "architecture `Qwen3ForCausalLM` (config.json) is not served here: it is a language model ([lm])",
    );

    let unsupported = dir.path().join("unsupported");
    crate::common::copy_dir(&tiny, &unsupported);
    let cfg = unsupported.join("vae/config.json");
    // Patches folded into channels need a VAE whose first conv takes them (3 × 2² = 12 channels).
    let text = std::fs::read_to_string(&cfg).unwrap().replace("\"patch_size\": null", "\"patch_size\": 2");
    std::fs::write(&cfg, text).unwrap();
    assert_user_error(
        &fastvideo(&["generate", "--prompt", "x", "--model", unsupported.to_str().unwrap()]),
        "config key `in_channels` = 3 is not supported",
    );
}
