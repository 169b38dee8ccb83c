//! The shipped model with sound (models/default-sound, a small LTX-2 trained by
//! models/training/train_sound.py): what a user hears from it on a CPU, scored by `fastvideo eval`'s
//! listener, and a generation with its folder's defaults.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fastvideo(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fastvideo")).args(args).output().expect("binary runs")
}

fn shipped() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/default-sound")
}

/// Ten held-out scenes, two of each shape (`--stride 6`: the list runs shape by shape). Measured
/// on these 10: pitch 100 %, colour and background 100 %, motion 50 %, picture shape 20 %; on all
/// 60 held-out scenes pitch 100 %, tonality 0.95 (docs/quality.md). The sound's floors are well
/// under that and well over chance (pitch 20 %: five shapes; tonality near 0 for noise). The
/// picture's shapes and motions are at chance-like levels in this under-trained model and are
/// not asserted; colour and background are.
#[test]
fn shipped_sound_model_sounds_the_shape_it_draws() {
    let model = shipped();
    let r = fastvideo(&["eval", "--model", model.to_str().unwrap(), "--stride", "6", "--json", "--device", "cpu"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(v["tally"]["clips"], 10, "{v}");
    assert_eq!(v["sound_tally"]["clips"], 10, "{v}");
    let sound = &v["sound_accuracy"];
    assert!(sound["pitch"].as_f64().unwrap() >= 0.8, "{sound}");
    assert!(sound["tonality"].as_f64().unwrap() >= 0.8, "{sound}");
    let acc = &v["accuracy"];
    assert!(acc["color"].as_f64().unwrap() >= 0.7, "{acc}");
    assert!(acc["background"].as_f64().unwrap() >= 0.7, "{acc}");
    let r = fastvideo(&["eval", "--model", model.to_str().unwrap(), "--stride", "0"]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success() && err.contains("--stride") && !err.contains("panicked"), "{err}");
}

/// `generate` with nothing but a prompt: the folder's defaults (64×64, 17 frames at 24 fps) and a
/// 16 kHz stereo WAV as long as the clip, whose pitch is the star's.
#[test]
fn shipped_sound_model_generates_a_clip_with_its_sound_from_the_folder_defaults() {
    let model = shipped();
    let dir = tempfile::tempdir().unwrap();
    let (out, wav, frames) = (dir.path().join("star.mp4"), dir.path().join("star.wav"), dir.path().join("frames"));
    let r = fastvideo(&[
        "generate",
        "--model",
        model.to_str().unwrap(),
        "--prompt",
        "a red star moving left on a black background",
        "--device",
        "cpu",
        "--seed",
        "3",
        "--out",
        out.to_str().unwrap(),
        "--audio-out",
        wav.to_str().unwrap(),
        "--frames-dir",
        frames.to_str().unwrap(),
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let pngs = std::fs::read_dir(&frames).unwrap().count();
    assert_eq!(pngs, 17, "frames");
    let reader = hound::WavReader::open(&wav).unwrap();
    assert_eq!((reader.spec().sample_rate, reader.spec().channels), (16000, 2));
    let samples: Vec<f32> = reader.into_samples::<i16>().map(|s| s.unwrap() as f32 / 32767.0).collect();
    let seconds = samples.len() as f64 / 2.0 / 16000.0;
    assert!((seconds - 17.0 / 24.0).abs() < 0.05, "{seconds} s of sound for 17 frames at 24 fps");
    let heard = fastvideo_procedural::listen(&fastvideo_procedural::Soundtrack { rate: 16000, samples });
    assert_eq!(heard.shape, Some(fastvideo_procedural::Shape::Star), "{heard:?}");
}
