//! Component and end-to-end parity against diffusers/transformers on CPU, float32. Fixtures come
//! from tests/fixtures/make_fixtures.py (tiny random configs saved in the diffusers layout).
//! Error measure everywhere: max |ours - reference| / max |reference|.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use fastvideo_pipeline::{Value, Values};
use fastvideo_request::{InputPart, OmniRequest, TextRole};
use fastvideo_wan::pipeline::{self, values};
use fastvideo_wan::WanModel;
use tch::{Device, Tensor};

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn fx(name: &str) -> &'static Tensor {
    crate::common::fixture("wan_tiny.safetensors", name)
}

fn model() -> WanModel {
    WanModel::load(&fixture_dir().join("tiny-wan"), Device::Cpu).expect("tiny model loads")
}

fn rel_err(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.size(), b.size(), "shape mismatch");
    let diff = (a - b).abs().max().double_value(&[]);
    diff / b.abs().max().double_value(&[]).max(1e-12)
}

fn no_grad<T>(f: impl FnOnce() -> T) -> T {
    tch::no_grad(f)
}

#[test]
fn transformer_matches_diffusers() {
    let m = model();
    let out = no_grad(|| {
        m.transformer.forward(
            fx("transformer.hidden_states"),
            fx("transformer.timestep"),
            fx("transformer.encoder_hidden_states"),
        )
    })
    .unwrap();
    let e = rel_err(&out, fx("transformer.out"));
    // Tolerance 1e-4 relative (fp32; the reference applies rotary embeddings in float64).
    eprintln!("transformer: relative error {e:.3e}");
    assert!(e < 1e-4, "transformer relative error {e}");
}

#[test]
fn vae_encode_matches_diffusers() {
    let m = model();
    let params = no_grad(|| m.vae.encode_params(fx("vae.video"))).unwrap();
    let e = rel_err(&params, fx("vae.encoded"));
    eprintln!("vae encode (posterior parameters): relative error {e:.3e}");
    assert!(e < 1e-4, "vae encode (posterior parameters) relative error {e}"); // tolerance 1e-4
    let mode = no_grad(|| m.vae.encode(fx("vae.video"))).unwrap();
    let e = rel_err(&mode, fx("vae.mode"));
    eprintln!("vae encode (mode): relative error {e:.3e}");
    assert!(e < 1e-4, "vae encode (mode) relative error {e}"); // tolerance 1e-4
}

#[test]
fn vae_decode_matches_diffusers() {
    let m = model();
    let out = no_grad(|| m.vae.decode(fx("vae.z"))).unwrap();
    let e = rel_err(&out, fx("vae.decoded"));
    eprintln!("vae decode: relative error {e:.3e}");
    assert!(e < 1e-4, "vae decode relative error {e}"); // tolerance 1e-4
}

#[test]
fn umt5_matches_transformers_and_tokenizer_matches() {
    let m = model();
    let prompts = ["a red circle moving left on a white background".to_string(), "blurry".to_string()];
    let (ids, mask) = m.tokenizer.encode(&prompts, 16, Device::Cpu).unwrap();
    assert_eq!(
        Vec::<i64>::try_from(ids.flatten(0, -1)).unwrap(),
        Vec::<i64>::try_from(fx("umt5.input_ids").flatten(0, -1)).unwrap()
    );
    assert_eq!(
        Vec::<i64>::try_from(mask.flatten(0, -1)).unwrap(),
        Vec::<i64>::try_from(fx("umt5.attention_mask").flatten(0, -1)).unwrap()
    );
    let out = no_grad(|| m.text_encoder.forward(&ids, &mask)).unwrap();
    let e = rel_err(&out, fx("umt5.last_hidden_state"));
    eprintln!("umt5: relative error {e:.3e}");
    assert!(e < 1e-4, "umt5 relative error {e}"); // tolerance 1e-4
}

fn pipeline_request(return_latents: bool) -> OmniRequest {
    let mut r = OmniRequest::text_to_video("parity", "a red circle moving left on a white background");
    r.inputs.push(InputPart::Text { text: "blurry low quality".into(), role: TextRole::Negative });
    r.diffusion.height = Some(32);
    r.diffusion.width = Some(32);
    r.diffusion.num_frames = Some(9);
    r.diffusion.num_inference_steps = Some(4);
    r.diffusion.guidance_scale = Some(5.0);
    r.outputs.return_latents = return_latents;
    r.node_params.insert("text_encode".into(), serde_json::json!({"max_sequence_length": 16}));
    r
}

#[test]
fn full_pipeline_matches_diffusers() {
    let m = model();
    let spec = Arc::new(pipeline::text_to_video(&m, pipeline::default_guidance()).unwrap());
    let req = pipeline_request(true).resolve(&m.limits(), || 0).unwrap();
    assert_eq!(req.sampler, fastvideo_request::SamplerKind::Unipc, "scheduler config picks UniPC");
    let mut init = Values::default();
    init.insert(values::INITIAL_LATENTS, Value::Tensor(fx("pipeline.latents_in").shallow_clone()));
    let (out, progress) = crate::common::run_pipeline(spec, req, init);
    assert_eq!(progress, 4, "one progress event per denoise step");
    assert_eq!(out.metrics.forwards, 8, "CFG runs two forwards per step");
    crate::common::assert_matches_reference("t2v", &out, fx("pipeline.latents_out"), fx("pipeline.video"));
}
