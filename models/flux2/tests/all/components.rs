//! Each component against diffusers/transformers on the tiny folder (float32, CPU; fixtures
//! from tests/fixtures/make_flux2_fixtures.py).

use fastvideo_flux2::Flux2Transformer;
use tch::{Device, Kind};

use crate::common::{folder, load, rel};

/// One forward with reference tokens at time 10: float32 rounding only (2e-6 measured; the
/// bound leaves room for another BLAS).
#[test]
fn transformer_matches_diffusers() {
    let f = load("flux2/transformer.safetensors");
    let t = Flux2Transformer::load(&folder().join("transformer"), Device::Cpu, Kind::Float).unwrap();
    let out = t.forward(
        &f["hidden_states"],
        &f["encoder_hidden_states"],
        &f["timestep"],
        &f["img_ids"].squeeze_dim(0),
        &f["txt_ids"].squeeze_dim(0),
    );
    let e = rel(&out, &f["out"]);
    eprintln!("transformer: {e:.2e}");
    assert!(e < 1e-5, "transformer: {e:.2e}");
}

/// Decode, and encode to the posterior's mode: float32 rounding only.
#[test]
fn vae_matches_diffusers() {
    let f = load("flux2/vae.safetensors");
    let vae = fastvideo_flux2::vae::Flux2Vae::load(&folder().join("vae"), Device::Cpu, Kind::Float).unwrap();
    let e = rel(&vae.decode(&f["z"]), &f["decoded"]);
    assert!(e < 1e-5, "decode: {e:.2e}");
    let e = rel(&vae.encode(&f["image"]), &f["encoded"]);
    assert!(e < 1e-5, "encode: {e:.2e}");
}

/// The chat-templated, padded tokens exactly; the embeddings of a prompt and of the empty
/// prompt (the negative branch) to float32 rounding through 27 layers.
#[test]
fn prompt_encoder_matches_transformers() {
    let f = load("flux2/text.safetensors");
    let dir = folder();
    let enc = fastvideo_flux2::prompt::PromptEncoder::load(
        &dir.join("text_encoder"),
        &dir.join("tokenizer"),
        Device::Cpu,
        Kind::Float,
    )
    .unwrap();
    for (key, prompt) in [("", "a red fox jumps over the lazy dog"), ("neg_", "")] {
        let (ids, real) = enc.ids(prompt).unwrap();
        let want: Vec<i64> = Vec::try_from(&f[&format!("{key}ids")]).unwrap();
        assert_eq!(ids, want, "{key}ids");
        assert_eq!(real as i64, f[&format!("{key}mask")].sum(Kind::Int64).int64_value(&[]));
        let e = rel(&enc.encode(&[prompt]).unwrap().squeeze_dim(0), &f[&format!("{key}embeds")]);
        assert!(e < 1e-5, "{key}embeds: {e:.2e}");
    }
}

/// The scheduler's sigmas under BFL's empirical shift, below and above its 4300-token knee:
/// exact in float32.
#[test]
fn schedule_matches_diffusers() {
    let f = load("flux2/schedule.safetensors");
    let cfg: fastvideo_layers::flow_match::FlowMatchConfig =
        fastvideo_layers::flow_match::FlowMatchConfig::load(&folder().join("scheduler/scheduler_config.json")).unwrap();
    for (tokens, steps) in [(24, 3), (5000, 4)] {
        let ours = fastvideo_flux2::schedule::sigmas(&cfg, tokens, steps);
        let want: Vec<f32> = Vec::try_from(&f[&format!("sigmas_{tokens}_{steps}")]).unwrap();
        assert_eq!(ours, want, "{tokens} tokens, {steps} steps");
    }
}
