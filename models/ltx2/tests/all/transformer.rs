//! The audio-video transformer against diffusers' `LTX2VideoTransformer3DModel` on two tiny
//! layouts (float32, CPU; tests/fixtures/make_ltx2_fixtures.py): LTX-2.0's (interleaved rotary
//! positions, caption projections) and LTX-2.3's (split positions, gated attention, prompt
//! modulation from the sigma, perturbed attention), each on several of the forward's options.

use std::collections::HashMap;

use fastvideo_ltx2::{Ltx2Inputs, Ltx2Transformer};
use fastvideo_pipeline::AdapterRows;
use tch::{Device, Kind, Tensor};

use crate::common::{fixture, load, rel};

/// Runs `case` of `f` on `t` (the fixture's inputs; the case's own options).
fn run(t: &Ltx2Transformer, f: &HashMap<String, Tensor>, case: &str) -> (Tensor, Tensor) {
    run_with(t, f, case, None, None)
}

/// [`run`] with a per-sample exchange mask and unmerged LoRA deltas.
pub(crate) fn run_with(
    t: &Ltx2Transformer,
    f: &HashMap<String, Tensor>,
    case: &str,
    exchange: Option<&Tensor>,
    lora: Option<&AdapterRows>,
) -> (Tensor, Tensor) {
    let shape = Vec::<i64>::try_from(&f["shape"]).unwrap();
    let token_t = case == "tokens";
    let timestep = if token_t { &f["token_timestep"] } else { &f["timestep"] };
    let with_sigma = t.cfg.prompt_modulation() || case == "cross";
    let stg = [1usize];
    let stg_mask = Tensor::from_slice(&[1.0f32, 0.0]);
    let x = Ltx2Inputs {
        video: &f["hidden_states"],
        audio: &f["audio_hidden_states"],
        text: &f["encoder_hidden_states"],
        audio_text: &f["audio_encoder_hidden_states"],
        text_mask: Some(&f["encoder_attention_mask"]),
        audio_text_mask: Some(&f["encoder_attention_mask"]),
        timestep,
        audio_timestep: token_t.then(|| &f["timestep"]),
        sigma: with_sigma.then(|| &f["sigma"]),
        audio_sigma: with_sigma.then(|| &f["audio_sigma"]),
        grid: [shape[0], shape[1], shape[2]],
        fps: 24.0,
        audio_frames: shape[3],
        isolate_modalities: case == "isolated",
        exchange_mask: exchange,
        stg_blocks: if case == "stg" { &stg } else { &[] },
        perturbation_mask: (case == "stg").then_some(&stg_mask),
        use_cross_timestep: case == "cross",
        lora,
    };
    t.forward(&x).unwrap()
}

/// float32 on both sides: summation order only (measured below 1e-6; the bound leaves room
/// for another BLAS).
fn check(layout: &str, cases: &[&str]) {
    let t = Ltx2Transformer::load(&fixture(&format!("transformer_{layout}")), Device::Cpu, Kind::Float).unwrap();
    let f = load(&format!("transformer_{layout}.safetensors"));
    for case in cases {
        let (video, audio) = run(&t, &f, case);
        let (ev, ea) = (rel(&video, &f[&format!("{case}.video")]), rel(&audio, &f[&format!("{case}.audio")]));
        eprintln!("{layout}/{case}: video {ev:.2e}, audio {ea:.2e}");
        assert!(ev < 1e-5 && ea < 1e-5, "{layout}/{case}: video {ev:.2e}, audio {ea:.2e}");
    }
}

#[test]
fn the_ltx_2_0_layout_matches_diffusers() {
    check("20", &["plain", "tokens"]);
}

#[test]
fn the_ltx_2_3_layout_matches_diffusers_with_guidance_passes() {
    check("23", &["plain", "tokens", "stg", "isolated", "cross"]);
}

#[test]
fn inputs_of_the_wrong_shape_are_refused_naming_them() {
    let t = Ltx2Transformer::load(&fixture("transformer_20"), Device::Cpu, Kind::Float).unwrap();
    let f = load("transformer_20.safetensors");
    let short = f["hidden_states"].narrow(1, 0, 5);
    let x = Ltx2Inputs {
        video: &short,
        audio: &f["audio_hidden_states"],
        text: &f["encoder_hidden_states"],
        audio_text: &f["audio_encoder_hidden_states"],
        text_mask: None,
        audio_text_mask: None,
        timestep: &f["timestep"],
        audio_timestep: None,
        sigma: None,
        audio_sigma: None,
        grid: [3, 2, 3],
        fps: 24.0,
        audio_frames: 5,
        isolate_modalities: false,
        exchange_mask: None,
        stg_blocks: &[],
        perturbation_mask: None,
        use_cross_timestep: false,
        lora: None,
    };
    let e = t.forward(&x).unwrap_err().to_string();
    assert!(e.contains("video tokens [2, 5, 8]") && e.contains("[2, 18, 8]"), "{e}");
}

/// Modality guidance's pass batched with the others: a per-sample exchange mask isolates the
/// streams of only the samples it zeroes — sample 0 as the plain forward, sample 1 as the
/// isolated one (diffusers has only the whole-batch flag, so each half is checked against it).
#[test]
fn a_per_sample_exchange_mask_isolates_only_its_samples() {
    let t = Ltx2Transformer::load(&fixture("transformer_23"), Device::Cpu, Kind::Float).unwrap();
    let f = load("transformer_23.safetensors");
    let keep = Tensor::from_slice(&[1.0f32, 0.0]);
    let (video, audio) = run_with(&t, &f, "plain", Some(&keep), None);
    for (sample, case) in [(0, "plain"), (1, "isolated")] {
        let ev = rel(&video.get(sample), &f[&format!("{case}.video")].get(sample));
        let ea = rel(&audio.get(sample), &f[&format!("{case}.audio")].get(sample));
        assert!(ev < 1e-5 && ea < 1e-5, "sample {sample} as {case}: video {ev:.2e}, audio {ea:.2e}");
    }
}
