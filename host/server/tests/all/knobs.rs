//! A model's own knobs through the OpenAI-style body, as the server reads it: the flat alias
//! (`boundary_ratio`, as before the knob schema) and the request plane's `diffusion.boundary_ratio`
//! are one knob.

use fastvideo_request::{KnobSchema, ModelLimits, OmniRequest};
use fastvideo_server::{video_request_from_form, video_request_from_json};

fn two_experts() -> ModelLimits {
    let mut l = ModelLimits::example();
    l.defaults.knobs = KnobSchema::example();
    l
}

#[test]
fn a_model_with_knobs_takes_the_flat_alias_and_the_diffusion_field_alike() {
    let l = two_experts();
    let flat = br#"{"prompt": "a", "boundary_ratio": 0.9, "guidance_scale_2": 3, "num_inference_steps": 8}"#;
    let flat = video_request_from_json(flat, &l).unwrap().resolve(&l, || 0).unwrap();
    let nested: OmniRequest = serde_json::from_value(serde_json::json!({
        "request_id": "request", "task": "t2v", "inputs": [{"type": "text", "text": "a"}],
        "diffusion": {"boundary_ratio": 0.9, "guidance_scale_2": 3, "num_inference_steps": 8},
    }))
    .unwrap();
    let nested = nested.resolve(&l, || 0).unwrap();
    assert_eq!(flat.knobs, nested.knobs);
    assert_eq!((flat.knob_f64("boundary_ratio"), flat.knob_f64("guidance_scale_2")), (Some(0.9), Some(3.0)));
    // The knob keeps its short decimal on the way through (a flat `f32` field).
    assert_eq!(flat.knobs["boundary_ratio"].to_string(), "0.9");
}

#[test]
fn a_form_knob_out_of_range_names_the_field() {
    let l = two_experts();
    let form = [("prompt", "a"), ("switch_step", "9"), ("num_inference_steps", "8")];
    let e = video_request_from_form(&form, &l).unwrap().resolve(&l, || 0).unwrap_err();
    assert_eq!((e.field.as_str(), e.rule.as_str()), ("diffusion.switch_step", "9 is past the request's 8 steps"));
    let form = [("prompt", "a"), ("boundary_ratio", "2")];
    let e = video_request_from_form(&form, &l).unwrap().resolve(&l, || 0).unwrap_err();
    assert_eq!((e.field.as_str(), e.rule.as_str()), ("diffusion.boundary_ratio", "2 must be in [0, 1]"));
}
