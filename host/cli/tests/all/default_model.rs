//! The default model's tooling as a user runs it: `fastvideo dataset` renders clips the analyzer
//! reads back exactly, and `fastvideo eval` scores the shipped model above a floor.

use std::path::Path;
use std::process::{Command, Output};

use fastvideo_procedural::{analyze, listen, Clip, Scene, SoundTally, Soundtrack};

fn fastvideo(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fastvideo")).args(args).output().expect("binary runs")
}

fn read_clips(dir: &Path) -> (serde_json::Value, Vec<u8>) {
    let meta: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("clips.json")).unwrap()).unwrap();
    (meta, std::fs::read(dir.join("clips.u8")).unwrap())
}

#[test]
fn dataset_writes_heldout_clips_that_analyze_back_to_their_prompts() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ds");
    let r =
        fastvideo(&["dataset", "--out", out.to_str().unwrap(), "--clips", "6", "--split", "heldout", "--seed", "3"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let (meta, bytes) = read_clips(&out);
    assert_eq!(meta["shape"], serde_json::json!([6, 17, 64, 64, 3]));
    let per_clip = 17 * 64 * 64 * 3;
    assert_eq!(bytes.len(), 6 * per_clip);
    for (i, p) in meta["prompts"].as_array().unwrap().iter().enumerate() {
        let scene = Scene::from_prompt(p.as_str().unwrap()).expect("prompt parses");
        assert!(scene.held_out(), "{p} is not a held-out scene");
        let clip = Clip { frames: 17, height: 64, width: 64, rgb: bytes[i * per_clip..(i + 1) * per_clip].to_vec() };
        let got = analyze(&clip);
        assert_eq!(
            (got.color, got.shape, got.motion, got.background),
            (Some(scene.color), Some(scene.shape), Some(scene.motion), scene.background),
            "{p}"
        );
    }
    // Deterministic from the seed.
    let again = dir.path().join("again");
    fastvideo(&["dataset", "--out", again.to_str().unwrap(), "--clips", "6", "--split", "heldout", "--seed", "3"]);
    assert_eq!(read_clips(&again).1, bytes);
}

/// `--sound` writes each clip's soundtrack beside it: the tone its picture determines, heard back
/// as the clip's own scene (pitch = shape; pan and loudness move as the object does).
#[test]
fn dataset_sound_is_heard_as_the_scene_the_picture_shows() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ds");
    let args = ["dataset", "--out", out.to_str().unwrap(), "--clips", "12", "--seed", "5", "--sound"];
    let r = fastvideo(&args);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let (meta, _) = read_clips(&out);
    // 17 frames at 24 fps at 16 kHz.
    let samples = (17.0f32 / 24.0 * 16_000.0).round() as usize;
    assert_eq!(meta["sound"]["shape"], serde_json::json!([12, samples, 2]));
    assert_eq!(meta["sound"]["rate"], 16_000);
    let bytes = std::fs::read(out.join("sounds.f32")).unwrap();
    assert_eq!(bytes.len(), 12 * samples * 2 * 4);
    let all: Vec<f32> = bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
    let mut tally = SoundTally::default();
    for (i, p) in meta["prompts"].as_array().unwrap().iter().enumerate() {
        let scene = Scene::from_prompt(p.as_str().unwrap()).unwrap();
        let track = Soundtrack { rate: 16_000, samples: all[i * 2 * samples..(i + 1) * 2 * samples].to_vec() };
        let heard = listen(&track);
        assert!(tally.add(&scene, &heard), "{p}: heard {heard:?}");
    }
    assert_eq!(tally.accuracy().pitch, 1.0);
    let r = fastvideo(&["dataset", "--out", out.to_str().unwrap(), "--sound", "--sound-rate", "100"]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success() && err.contains("--sound-rate") && !err.contains("panicked"), "{err}");
}

#[test]
fn dataset_and_eval_reject_bad_options_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let r = fastvideo(&["dataset", "--out", dir.path().to_str().unwrap(), "--split", "test"]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success() && err.contains("--split") && !err.contains("panicked"), "{err}");
    let r = fastvideo(&["eval", "--scenes", "everything"]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success() && err.contains("--scenes") && !err.contains("panicked"), "{err}");
    let r = fastvideo(&["eval", "--world", "--first-seed", "20"]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success() && err.contains("--first-seed") && !err.contains("panicked"), "{err}");
}

/// Smoke eval of the shipped model on the first held-out scenes (combinations it never saw).
/// Floors well under what was measured (these 12 scenes: 100 % on every attribute; all 60
/// held-out: colour, motion and background 100 %, shape 78 %, attribute mean 95 %,
/// docs/quality.md) and well over chance (colour and motion 17 %, shape 20 %, background 33 %).
/// No timing is asserted.
#[test]
fn shipped_model_beats_chance_on_heldout_prompts() {
    let r = fastvideo(&["eval", "--limit", "12", "--json", "--device", "cpu"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(v["tally"]["clips"], 12);
    let acc = &v["accuracy"];
    assert!(acc["attribute_mean"].as_f64().unwrap() >= 0.75, "{acc}");
    assert!(acc["color"].as_f64().unwrap() >= 0.75, "{acc}");
    assert!(acc["shape"].as_f64().unwrap() >= 0.5, "{acc}");
    assert!(acc["motion"].as_f64().unwrap() >= 0.75, "{acc}");
    assert!(acc["background"].as_f64().unwrap() >= 0.8, "{acc}");
}

/// `fastvideo eval --i2v` on the shipped image-to-video model, first 6 held-out scenes. Measured
/// on all 60 held-out scenes (docs/quality.md): first frame 30.9 dB mean (22.8 min), colour,
/// motion and background 100 %, shape 87 %, and 95 % of clips move the other way when the
/// prompt says the opposite motion. These 6: 27.4-34.7 dB, every attribute right. Floors well
/// under that and over chance (motion 17 %).
#[test]
fn shipped_i2v_model_starts_from_the_picture_and_moves_as_told() {
    let r = fastvideo(&["eval", "--i2v", "--limit", "6", "--json", "--device", "cpu"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    let s = &v["i2v"];
    assert_eq!(s["clips"], 6, "{s}");
    assert!(s["first_frame_psnr_mean"].as_f64().unwrap() >= 25.0, "{s}");
    assert!(s["first_frame_psnr_min"].as_f64().unwrap() >= 20.0, "{s}");
    let acc = &v["accuracy"];
    assert!(acc["color"].as_f64().unwrap() >= 0.8, "{acc}");
    assert!(acc["motion"].as_f64().unwrap() >= 0.8, "{acc}");
    assert!(s["swapped_motion_followed"].as_u64().unwrap() >= 4, "{s}");
    // --i2v with a text-to-video model is refused by name, before any generation.
    let t2v = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/default");
    let r = fastvideo(&["eval", "--i2v", "--limit", "1", "--model", t2v.to_str().unwrap(), "--device", "cpu"]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success() && err.contains("i2v") && !err.contains("panicked"), "{err}");
}
