//! Parity of the sound tokenizer with diffusers' `Cosmos3AVAEAudioTokenizer` (fixtures:
//! make_cosmos3_fixtures.py), and the strictness of its config.

use std::path::PathBuf;

use fastvideo_cosmos3::{SoundTokenizer, SoundTokenizerConfig};
use tch::{Device, Kind};

use crate::common::{fixture, load, max_abs};

fn tokenizer() -> SoundTokenizer {
    tokenizer_in(Kind::Float)
}

fn tokenizer_in(kind: Kind) -> SoundTokenizer {
    SoundTokenizer::load(&fixture("tiny-cosmos3/sound_tokenizer"), Device::Cpu, kind).unwrap()
}

/// float64, against diffusers' float64 decode: the same convolutions with the weight norm folded
/// once instead of per call, so only float64 rounding separates them. The fixture's random
/// decoder amplifies rounding ~1e4-fold (diffusers' own float32 and float64 outputs differ by
/// 6e-3 before the clamp), hence float64 for a tight check; 1e-9 is still ~1e5 float64 ulps of
/// headroom, while a wrong norm axis of the transposed convolution, a missing output padding or
/// a linear-scale Snake move samples by >1e-2.
const DECODE_F64_TOL: f64 = 1e-9;

#[test]
fn decode_matches_diffusers_in_float64() {
    let f = load("cosmos3/sound_decode_f64.safetensors");
    let sound = tokenizer_in(Kind::Double);
    assert_eq!((sound.hop(), sound.sample_rate(), sound.channels()), (6, 8000, 2));
    let out = sound.decode(&f["latent"]).unwrap();
    assert_eq!(out.kind(), Kind::Double);
    let err = max_abs(&out, &f["waveform"]);
    let unclamped = f["waveform"].abs().lt(1.0).sum(Kind::Int64).int64_value(&[]);
    eprintln!("sound decode f64: max abs {err:.2e} ({unclamped} of 72 samples inside the clamp)");
    assert!(unclamped > 0, "fixture waveform is all clamped");
    assert!(err < DECODE_F64_TOL, "sound decode f64: max abs {err:.2e}");
}

/// float32, against diffusers' float32 decode of the pipeline fixture: bounded by the float32
/// rounding the random decoder amplifies (see [`DECODE_F64_TOL`]): measured 1.4e-3 after the
/// clamp, against diffusers' own float32-versus-float64 spread of 3e-4 after the clamp and
/// 6e-3 before it. Structural errors move clamped samples across the whole [-1, 1] range.
const DECODE_F32_TOL: f64 = 1e-2;

#[test]
fn decode_matches_diffusers_in_float32() {
    let f = load("cosmos3/sound_decode.safetensors");
    let out = tokenizer().decode(&f["latent"]).unwrap();
    let err = max_abs(&out, &f["waveform"]);
    eprintln!("sound decode f32: max abs {err:.2e}");
    assert!(err < DECODE_F32_TOL, "sound decode f32: max abs {err:.2e}");
}

/// float32 on the CPU; the moments reach ~14 in magnitude, so 1e-4 is ~1e-5 relative: the STFT
/// and the ConvNeXt stack agree to ~1e-6. A missing peak normalisation, padding to the wrong
/// length, swapped real/imag features or the wrong half of the moments each change the mean
/// by >1e-1 (or its shape).
const ENCODE_TOL: f64 = 1e-4;

#[test]
fn encode_matches_diffusers() {
    let f = load("cosmos3/sound_encode.safetensors");
    let mean = tokenizer().encode(&f["waveform"]).unwrap();
    let err = max_abs(&mean, &f["mean"]);
    eprintln!("sound encode: max abs {err:.2e} (mean peak {:.2})", f["mean"].abs().max().double_value(&[]));
    assert!(err < ENCODE_TOL, "sound encode: max abs {err:.2e}");
}

#[test]
fn decode_refuses_wrong_latent_channels() {
    let latent = tch::Tensor::zeros([1, 7, 4], (Kind::Float, Device::Cpu));
    let err = tokenizer().decode(&latent).unwrap_err().to_string();
    assert!(err.contains("[B, 8, T]"), "{err}");
}

/// The fixture's config with `edit` applied, written to a temporary folder.
fn edited_config(name: &str, edit: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>)) -> PathBuf {
    let text = std::fs::read_to_string(fixture("tiny-cosmos3/sound_tokenizer/config.json")).unwrap();
    let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
    edit(value.as_object_mut().unwrap());
    let dir = std::env::temp_dir().join(format!("fastvideo-cosmos3-sound-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("config.json");
    std::fs::write(&path, serde_json::to_string(&value).unwrap()).unwrap();
    path
}

fn refusal(name: &str, edit: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>)) -> String {
    let path = edited_config(name, edit);
    let err = SoundTokenizerConfig::load(&path).map(|_| ()).unwrap_err().to_string();
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
    err
}

#[test]
fn config_accepts_the_fixture_and_refuses_other_layouts() {
    let ok = SoundTokenizerConfig::load(&fixture("tiny-cosmos3/sound_tokenizer/config.json")).unwrap();
    assert_eq!((ok.vocoder_input_dim, ok.hop()), (8, 6));
    for (key, value) in [
        ("dec_type", serde_json::json!("other")),
        ("model_type", serde_json::json!("autoencoder_v1")),
        ("snake_logscale", serde_json::json!(false)),
        ("use_cuda_kernel", serde_json::json!(true)),
        ("latent_mean", serde_json::json!(0.5)),
        ("bottleneck", serde_json::json!({"type": "rvq"})),
        ("causal", serde_json::json!(true)),
    ] {
        let err = refusal(key, |m| {
            m.insert(key.into(), value.clone());
        });
        assert!(err.contains(&format!("`{key}`")) && err.contains("not supported"), "{key}: {err}");
    }
    let err = refusal("unknown", |m| {
        m.insert("dec_mystery_flag".into(), serde_json::json!(true));
    });
    assert!(err.contains("dec_mystery_flag") && err.contains("unsupported config key"), "{err}");
}

/// diffusers disables the encoder of a folder without `encoder.*` tensors: such a folder still
/// decodes (identically) and refuses to encode, rather than failing to load.
#[test]
fn decoder_only_folder_decodes_and_refuses_to_encode() {
    let src = fixture("tiny-cosmos3/sound_tokenizer");
    let dir = std::env::temp_dir().join(format!("fastvideo-cosmos3-sound-{}-decoder-only", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(src.join("config.json"), dir.join("config.json")).unwrap();
    let all = tch::Tensor::read_safetensors(src.join("diffusion_pytorch_model.safetensors")).unwrap();
    let decoder: Vec<_> = all.into_iter().filter(|(k, _)| !k.starts_with("encoder.")).collect();
    tch::Tensor::write_safetensors(&decoder, dir.join("diffusion_pytorch_model.safetensors")).unwrap();
    let sound = SoundTokenizer::load(&dir, Device::Cpu, Kind::Float);
    let _ = std::fs::remove_dir_all(&dir);
    let sound = sound.unwrap();
    let f = load("cosmos3/sound_decode.safetensors");
    let full = tokenizer().decode(&f["latent"]).unwrap();
    assert_eq!(max_abs(&sound.decode(&f["latent"]).unwrap(), &full), 0.0);
    let err = sound.encode(&f["waveform"]).unwrap_err().to_string();
    assert!(err.contains("decoder-only"), "{err}");
}
