//! Each component against diffusers/transformers on the tiny folder (float32, CPU; fixtures
//! from tests/fixtures/make_qwenimage_fixtures.py).

use fastvideo_qwenimage::QwenImageTransformer;
use tch::{Device, Kind};

use crate::common::{folder, load, rel};

/// One forward: float32 rounding only (the rotation multiplies complex numbers there, real
/// pairs here).
#[test]
fn transformer_matches_diffusers() {
    let f = load("qwenimage/transformer.safetensors");
    let (t, _) = QwenImageTransformer::load(&folder().join("transformer"), None, Device::Cpu, Kind::Float).unwrap();
    let out = t.forward(&f["hidden_states"], &f["encoder_hidden_states"], 0.731, (4, 6));
    let e = rel(&out, &f["out"]);
    eprintln!("transformer: {e:.2e}");
    assert!(e < 1e-5, "transformer: {e:.2e}");
}

/// The templated ids exactly; the embeddings past the 34 template tokens to float32 rounding.
#[test]
fn prompt_encoder_matches_transformers() {
    let f = load("qwenimage/text.safetensors");
    let dir = folder();
    let enc = fastvideo_qwenimage::prompt::PromptEncoder::load(
        &dir.join("text_encoder"),
        &dir.join("tokenizer"),
        Device::Cpu,
        Kind::Float,
    )
    .unwrap();
    for (key, prompt) in [("", "a red fox jumps over the lazy dog"), ("neg_", "blurry, low quality")] {
        let want: Vec<i64> = Vec::try_from(&f[&format!("{key}ids")]).unwrap();
        assert_eq!(enc.ids(prompt).unwrap(), want, "{key}ids");
        let e = rel(&enc.encode(prompt).unwrap(), &f[&format!("{key}embeds")]);
        assert!(e < 1e-5, "{key}embeds: {e:.2e}");
    }
}

/// The Wan-style VAE (diffusers `AutoencoderKLQwenImage`) decodes as the reference.
#[test]
fn vae_matches_diffusers() {
    let f = load("qwenimage/vae.safetensors");
    let vae = fastvideo_qwenimage::model::load_vae(&folder().join("vae"), Device::Cpu, Kind::Float).unwrap();
    let e = rel(&vae.decode(&f["z"]).unwrap(), &f["decoded"]);
    assert!(e < 1e-5, "decode: {e:.2e}");
}

/// Sigmas under the linear `mu` and `shift_terminal`: exact in float32.
#[test]
fn schedule_matches_diffusers() {
    let f = load("qwenimage/schedule.safetensors");
    let cfg =
        fastvideo_layers::flow_match::FlowMatchConfig::load(&folder().join("scheduler/scheduler_config.json")).unwrap();
    for (tokens, steps) in [(24, 3), (6000, 4)] {
        let ours = fastvideo_qwenimage::denoise::sigmas(&cfg, tokens, steps);
        let want: Vec<f32> = Vec::try_from(&f[&format!("sigmas_{tokens}_{steps}")]).unwrap();
        assert_eq!(ours, want, "{tokens} tokens, {steps} steps");
    }
}

/// Edit-2511's `zero_cond_t` (reference tokens modulated at time 0) on the same weights.
#[test]
fn zero_cond_t_modulates_references_at_time_zero_as_diffusers() {
    let f = load("qwenimage/transformer_zero_cond.safetensors");
    let dir = folder().join("transformer");
    let mut cfg = fastvideo_qwenimage::config::TransformerConfig::load(&dir.join("config.json")).unwrap();
    cfg.zero_cond_t = true;
    let w =
        fastvideo_torch::weights::Weights::from_dir(&dir, "diffusion_pytorch_model", Device::Cpu, Kind::Float).unwrap();
    let t = QwenImageTransformer::new(cfg, &w).unwrap();
    let (image, text) = (f["hidden_states"].get(0), f["encoder_hidden_states"].get(0));
    let grids = [(4, 6), (2, 3)];
    let s = fastvideo_qwenimage::transformer::Sample { image: &image, grids: &grids, text: &text, timestep: 0.731 };
    let out = t.forward_packed(&[s]).pop().unwrap().unsqueeze(0);
    let e = rel(&out, &f["out"]);
    assert!(e < 1e-5, "zero_cond_t: {e:.2e}");
}
