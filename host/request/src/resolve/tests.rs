//! `OmniRequest::resolve` against example limits: defaults, bounds, and the field each error names.

use super::*;
use crate::TextRole;

fn limits() -> ModelLimits {
    ModelLimits {
        family: "Wan".into(),
        tasks: vec![TaskType::T2v, TaskType::T2i],
        image_roles: first_frame_only(),
        video: Some(VideoLimits { frame_multiple: 4, max_frames: 121 }),
        picture: Some(PictureLimits { spatial_multiple: 16, max_side: 1280 }),
        audio: None,
        action: None,
        references: None,
        max_steps: 200,
        defaults: Defaults {
            steps: 20,
            guidance_scale: 5.0,
            shift: 3.0,
            height: 64,
            width: 64,
            num_frames: 17,
            fps: 16,
            sampler: SamplerKind::Unipc,
            negative_prompt: String::new(),
            timesteps: None,
            knobs: crate::KnobSchema::default(),
        },
    }
}

fn req() -> OmniRequest {
    OmniRequest::text_to_video("r1", "a red circle")
}

#[test]
fn defaults_fill_missing_fields() {
    let r = req().resolve(&limits(), || 7).unwrap();
    assert_eq!((r.steps, r.num_frames, r.height, r.seed), (20, 17, 64, 7));
    assert_eq!(r.sampler, SamplerKind::Unipc);
    assert!(r.does_cfg());
}

#[test]
fn frames_must_be_4k_plus_1() {
    let mut r = req();
    r.diffusion.num_frames = Some(16);
    let e = r.resolve(&limits(), || 0).unwrap_err();
    assert_eq!(e.field, "diffusion.num_frames");
    assert!(e.rule.contains("4k+1") && e.rule.contains("e.g. 13 or 17"), "{e}");
    // Past the limit the hint is the largest valid count, never a value out of range too.
    let max = limits().video.unwrap().max_frames;
    for n in [max + 1, 100_000, u32::MAX] {
        r.diffusion.num_frames = Some(n);
        let e = r.resolve(&limits(), || 0).unwrap_err();
        let top = (max - 1) / 4 * 4 + 1;
        assert!(e.rule.ends_with(&format!("(e.g. {top})")), "{n}: {e}");
    }
}

#[test]
fn sizes_must_be_multiples_of_16() {
    let mut r = req();
    r.diffusion.width = Some(70);
    let e = r.resolve(&limits(), || 0).unwrap_err();
    assert_eq!(e.field, "diffusion.width");
    assert!(e.rule.contains("multiple of 16"), "{e}");
}

#[test]
fn empty_prompt_and_bad_numbers_are_named() {
    let mut r = req();
    r.inputs = vec![InputPart::Text { text: "  ".into(), role: Default::default() }];
    assert_eq!(r.resolve(&limits(), || 0).unwrap_err().field, "prompt");
    let mut r = req();
    r.diffusion.num_inference_steps = Some(0);
    assert_eq!(r.resolve(&limits(), || 0).unwrap_err().field, "diffusion.num_inference_steps");
    let mut r = req();
    r.diffusion.guidance_scale = Some(f32::NAN);
    assert_eq!(r.resolve(&limits(), || 0).unwrap_err().field, "diffusion.guidance_scale");
    let mut r = req();
    r.task = TaskType::I2v;
    let e = r.resolve(&limits(), || 0).unwrap_err();
    assert!(e.to_string().starts_with("task: Wan does not support `i2v`"), "{e}");
}

#[test]
fn image_task_forces_one_frame_and_negative_prompt_sources() {
    let mut r = req();
    r.task = TaskType::T2i;
    r.diffusion.num_frames = Some(16);
    r.inputs.push(InputPart::Text { text: "blurry".into(), role: TextRole::Negative });
    let out = r.resolve(&limits(), || 0).unwrap();
    assert_eq!(out.num_frames, 1);
    assert_eq!(out.negative_prompt, "blurry");
    r.diffusion.negative_prompt = Some("grainy".into());
    assert_eq!(r.resolve(&limits(), || 0).unwrap().negative_prompt, "grainy");
}

#[test]
fn sde_fields_are_checked_and_defaulted() {
    let mut r = req();
    r.sampling.sampler = Some(SamplerKind::FlowSde);
    r.diffusion.num_inference_steps = Some(4);
    let out = r.resolve(&limits(), || 0).unwrap();
    assert_eq!((out.noise_level, out.sde_steps.clone()), (DEFAULT_NOISE_LEVEL, vec![0, 1, 2, 3]));
    r.sampling.sde_steps = Some(vec![2, 0, 2]);
    r.sampling.noise_level = Some(1.2);
    let out = r.resolve(&limits(), || 0).unwrap();
    assert_eq!((out.noise_level, out.sde_steps), (1.2, vec![0, 2]));
    r.sampling.sde_steps = Some(vec![4]);
    let e = r.resolve(&limits(), || 0).unwrap_err();
    assert_eq!(e.field, "sampling.sde_steps");
    assert!(e.rule.contains("past the last of 4"), "{e}");
    r.sampling.sde_steps = None;
    r.sampling.noise_level = Some(0.0);
    assert_eq!(r.resolve(&limits(), || 0).unwrap_err().field, "sampling.noise_level");
    // The SDE fields mean nothing to a deterministic sampler: refused, not ignored.
    let mut r = req();
    r.sampling.noise_level = Some(0.5);
    let e = r.resolve(&limits(), || 0).unwrap_err();
    assert_eq!(e.field, "sampling.noise_level");
    assert!(e.rule.contains("flow_sde") && e.rule.contains("unipc"), "{e}");
}

#[test]
fn json_round_trip_and_unknown_fields_are_refused() {
    let r = req();
    let s = serde_json::to_string(&r).unwrap();
    let back: OmniRequest = serde_json::from_str(&s).unwrap();
    assert_eq!(back, r);
    let bad = s.replace("\"request_id\":", "\"stepz\":3,\"request_id\":");
    let e = serde_json::from_str::<OmniRequest>(&bad).unwrap_err().to_string();
    assert!(e.contains("stepz"), "{e}");
    // In `diffusion` an unknown name may be a model's knob: `resolve` refuses it for this one.
    let bad = s.replace("\"diffusion\":{", "\"diffusion\":{\"stepz\":3,");
    let e = serde_json::from_str::<OmniRequest>(&bad).unwrap().resolve(&limits(), || 0).unwrap_err();
    assert_eq!(e.field, "diffusion.stepz");
}

#[test]
fn media_inputs_match_the_task() {
    let mut l = limits();
    l.tasks = vec![TaskType::T2v, TaskType::I2v, TaskType::V2v];
    let mut r = req();
    r.diffusion.strength = Some(0.5);
    assert_eq!(r.resolve(&l, || 0).unwrap_err().field, "diffusion.strength");
    r.diffusion.strength = None;
    r.diffusion.resize_mode = Some(crate::ResizeMode::Crop);
    assert_eq!(r.resolve(&l, || 0).unwrap_err().field, "diffusion.resize_mode");
    let mut r = req();
    r.task = TaskType::V2v;
    assert!(r.resolve(&l, || 0).unwrap_err().rule.contains("needs a video"));
    let mut r = req();
    r.task = TaskType::I2v;
    assert!(r.resolve(&l, || 0).unwrap_err().rule.contains("needs an image"));
    let mut r = req();
    r.inputs.push(InputPart::Image { path: Some("x.png".into()), b64: None, role: Default::default() });
    let e = r.resolve(&l, || 0).unwrap_err();
    assert_eq!((e.field.as_str(), e.rule.contains("only text")), ("inputs[1]", true), "{e}");
    let mut r = req();
    r.task = TaskType::I2v;
    r.inputs.push(InputPart::Image { path: None, b64: Some("aGVsbG8=".into()), role: Default::default() });
    let e = r.resolve(&l, || 0).unwrap_err();
    assert_eq!((e.field.as_str(), e.rule.contains("not an image")), ("inputs[1]", true), "{e}");
}

#[test]
fn pictures_match_the_models_image_roles() {
    use crate::ImageRole::{FirstFrame, LastFrame};
    let mut png = Vec::new();
    image::RgbImage::new(2, 2).write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png).unwrap();
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(&png);
    let with = |roles: &[crate::ImageRole]| {
        let mut r = req();
        r.task = TaskType::I2v;
        for &role in roles {
            r.inputs.push(InputPart::Image { path: None, b64: Some(b64.clone()), role });
        }
        r
    };
    let i2v = ModelLimits { tasks: vec![TaskType::I2v], image_roles: vec![FirstFrame], ..limits() };
    assert_eq!(with(&[FirstFrame]).resolve(&i2v, || 0).unwrap().images.len(), 1);
    let e = with(&[FirstFrame, LastFrame]).resolve(&i2v, || 0).unwrap_err();
    assert_eq!((e.field.as_str(), e.rule.contains("takes no last_frame image")), ("inputs[2]", true), "{e}");
    let flf2v = ModelLimits { image_roles: vec![FirstFrame, LastFrame], ..i2v };
    assert_eq!(with(&[FirstFrame, LastFrame]).resolve(&flf2v, || 0).unwrap().images.len(), 2);
    let e = with(&[FirstFrame]).resolve(&flf2v, || 0).unwrap_err();
    assert_eq!((e.field.as_str(), e.rule.contains("needs a last_frame image")), ("inputs", true), "{e}");
}

/// An image-to-video request for a `w`x`h` PNG (and a FLF2V last frame of `last`), fitted as `mode`
/// says to 832x480.
fn fit_request(w: u32, h: u32, last: Option<(u32, u32)>, mode: crate::ResizeMode) -> OmniRequest {
    use base64::Engine as _;
    let b64 = |w, h| {
        let mut png = Vec::new();
        image::RgbImage::new(w, h).write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png).unwrap();
        base64::engine::general_purpose::STANDARD.encode(&png)
    };
    let mut r = req();
    r.task = TaskType::I2v;
    r.inputs.push(InputPart::Image { path: None, b64: Some(b64(w, h)), role: crate::ImageRole::FirstFrame });
    if let Some((w, h)) = last {
        r.inputs.push(InputPart::Image { path: None, b64: Some(b64(w, h)), role: crate::ImageRole::LastFrame });
    }
    r.diffusion.resize_mode = Some(mode);
    (r.diffusion.width, r.diffusion.height) = (Some(832), Some(480));
    r
}

#[test]
fn a_picture_whose_fitting_would_explode_is_refused_at_admission() {
    use crate::ImageRole::{FirstFrame, LastFrame};
    use crate::ResizeMode::{Crop, Pad, Stretch};
    let i2v = ModelLimits { tasks: vec![TaskType::I2v], ..limits() };
    // Issue 54: 40000x1 padded to 832x480 is 40000x23077 (2.8 GB of RGB8), which wrapped u32
    // inside the job; 20000x1 is 0.7 GB. Both are refused here, naming the picture's input.
    for w in [40_000, 20_000] {
        let e = fit_request(w, 1, None, Pad).resolve(&i2v, || 0).unwrap_err();
        assert_eq!(e.field, "inputs[1]", "{e}");
        assert!(e.rule.contains(&format!("resize_mode `pad` makes the {w}x1 picture {w}x")), "{e}");
        assert!(e.rule.contains("megapixels), more than the 50 accepted"), "{e}");
    }
    // Stretched, the same picture reaches the model's resampler and CLIP processor as it is.
    let e = fit_request(40_000, 1, None, Stretch).resolve(&i2v, || 0).unwrap_err();
    assert!(e.rule.contains("the 40000x1 picture, a side longer than the 16384 pixels"), "{e}");
    let e = fit_request(8_000, 1, None, Stretch).resolve(&i2v, || 0).unwrap_err();
    assert!(e.rule.contains("long side more than 512 times its short side"), "{e}");
    // Cropped, it shrinks to the output's aspect: 2x1, fine.
    assert_eq!(fit_request(40_000, 1, None, Crop).resolve(&i2v, || 0).unwrap().images[0].width, 40_000);
    // Ordinary pictures pass every mode; a last frame is checked as the first is.
    for mode in [Stretch, Crop, Pad] {
        assert!(fit_request(56, 40, None, mode).resolve(&i2v, || 0).is_ok(), "{mode:?}");
    }
    let flf2v = ModelLimits { image_roles: vec![FirstFrame, LastFrame], ..i2v };
    assert!(fit_request(56, 40, Some((40, 56)), Pad).resolve(&flf2v, || 0).is_ok());
    let e = fit_request(56, 40, Some((20_000, 1)), Pad).resolve(&flf2v, || 0).unwrap_err();
    assert_eq!(e.field, "inputs[2]", "{e}");
}

#[test]
fn a_video_is_checked_frame_by_frame_as_a_picture_is() {
    let mut r = req();
    r.task = TaskType::V2v;
    r.inputs.push(InputPart::Video { path: None, b64: Some(String::new()) });
    r.diffusion.resize_mode = Some(crate::ResizeMode::Pad);
    let video = |width, height| InputVideo { width, height, fps: 8.0, frames: 1, rgb: Vec::new() };
    assert!(r.check_fits(&[], Some(&video(64, 48)), 832, 480).is_ok());
    // An 8K frame padded to a portrait output: 7680x13312, 102 megapixels a frame.
    let e = r.check_fits(&[], Some(&video(7680, 4320)), 480, 832).unwrap_err();
    assert_eq!(e.field, "inputs[1]", "{e}");
    assert!(e.rule.contains("7680x13312"), "{e}");
}

#[test]
fn video_to_video_keeps_the_input_frame_rate_unless_asked() {
    let mut l = limits();
    l.tasks = vec![TaskType::T2v, TaskType::V2v];
    // 9 frames at 25 fps (tests/fixtures/video/make.sh), which both decoders read.
    let path = format!("{}/../../tests/fixtures/video/h264_baseline.mp4", env!("CARGO_MANIFEST_DIR"));
    let mut r = req();
    r.task = TaskType::V2v;
    r.inputs.push(InputPart::Video { path: Some(path), b64: None });
    let resolved = r.resolve(&l, || 0).unwrap();
    assert_eq!((resolved.fps, resolved.num_frames), (25, 9));
    r.diffusion.fps = Some(16);
    assert_eq!(r.resolve(&l, || 0).unwrap().fps, 16);
}

/// Limits as an image model (one picture, no frames) and a language model (neither) declare them.
fn image_limits() -> ModelLimits {
    ModelLimits { family: "Flux".into(), tasks: vec![TaskType::T2i], video: None, ..limits() }
}

fn text_limits() -> ModelLimits {
    ModelLimits { family: "Qwen".into(), tasks: vec![TaskType::Text], picture: None, ..image_limits() }
}

#[test]
fn a_model_without_frames_refuses_frames_naming_the_field() {
    let mut r = req();
    r.task = TaskType::T2i;
    let out = r.resolve(&image_limits(), || 0).unwrap();
    assert_eq!((out.num_frames, out.height, out.width), (1, 64, 64));
    // One frame is what a picture is (the server sends it for `t2i`); more is refused, not ignored.
    r.diffusion.num_frames = Some(1);
    assert_eq!(r.resolve(&image_limits(), || 0).unwrap().num_frames, 1);
    r.diffusion.num_frames = Some(17);
    let e = r.resolve(&image_limits(), || 0).unwrap_err();
    assert_eq!(e.field, "diffusion.num_frames");
    assert!(e.rule.contains("Flux makes no video"), "{e}");
    // A video task on it is refused even where the family listed it.
    let l = ModelLimits { tasks: vec![TaskType::T2v, TaskType::T2i], ..image_limits() };
    let e = req().resolve(&l, || 0).unwrap_err();
    assert_eq!(e.field, "task");
    assert!(e.rule.contains("Flux makes no video"), "{e}");
}

#[test]
fn a_model_without_pictures_refuses_a_size_naming_the_field() {
    let mut r = req();
    r.task = TaskType::Text;
    let out = r.resolve(&text_limits(), || 0).unwrap();
    assert_eq!((out.num_frames, out.height, out.width), (0, 0, 0));
    r.diffusion.width = Some(64);
    let e = r.resolve(&text_limits(), || 0).unwrap_err();
    assert_eq!(e.field, "diffusion.width");
    assert!(e.rule.contains("Qwen makes no pictures"), "{e}");
    r.diffusion.width = None;
    r.diffusion.num_frames = Some(2);
    assert_eq!(r.resolve(&text_limits(), || 0).unwrap_err().field, "diffusion.num_frames");
}

#[test]
fn limits_keep_their_flat_wire_form_and_omit_what_a_model_lacks() {
    let video = serde_json::to_value(ModelLimits::example()).unwrap();
    for key in ["frame_multiple", "max_frames", "spatial_multiple", "max_side"] {
        assert!(video[key].is_u64(), "{key} in {video}");
    }
    assert_eq!(serde_json::from_value::<ModelLimits>(video).unwrap(), ModelLimits::example());
    let text = serde_json::to_value(text_limits()).unwrap();
    for key in ["frame_multiple", "max_frames", "spatial_multiple", "max_side"] {
        assert!(text.get(key).is_none(), "{key} in {text}");
    }
    assert_eq!(serde_json::from_value::<ModelLimits>(text).unwrap(), text_limits());
}

/// `limits()` with the example two-expert knobs.
fn two_experts() -> ModelLimits {
    let mut l = limits();
    l.defaults.knobs = crate::KnobSchema::example();
    l
}

#[test]
fn knobs_arrive_as_diffusion_fields_and_resolve_to_values() {
    let json = |diffusion: &str| {
        let text = format!(
            r#"{{"request_id": "k", "task": "t2v", "inputs": [{{"type": "text", "text": "a"}}], "diffusion": {diffusion}}}"#
        );
        serde_json::from_str::<OmniRequest>(&text).unwrap()
    };
    let r = json(r#"{"boundary_ratio": 0.5, "num_inference_steps": 10}"#).resolve(&two_experts(), || 0).unwrap();
    assert_eq!(
        (r.knob_f64("boundary_ratio"), r.knob_f64("guidance_scale_2"), r.knob_u32("switch_step")),
        (Some(0.5), Some(5.0), None)
    );
    // The same knob set in code is the same request.
    let mut set = req();
    set.diffusion.num_inference_steps = Some(10);
    set.diffusion.set_knob("boundary_ratio", Some(0.5));
    set.request_id = "k".into();
    set.inputs = vec![InputPart::Text { text: "a".into(), role: TextRole::Prompt }];
    assert_eq!(set.resolve(&two_experts(), || 0).unwrap(), r);
    // Written back, a knob is a diffusion field again.
    let v = serde_json::to_value(&set).unwrap();
    assert_eq!(v["diffusion"]["boundary_ratio"], 0.5);
    // On a model without knobs the field is refused, naming it.
    let e = json(r#"{"boundary_ratio": 0.5}"#).resolve(&limits(), || 0).unwrap_err();
    assert_eq!(e.field, "diffusion.boundary_ratio");
    assert!(e.rule.ends_with("(this model's own parameters: none)"), "{e}");
    let e = json(r#"{"switch_step": 30}"#).resolve(&two_experts(), || 0).unwrap_err();
    assert_eq!((e.field.as_str(), e.rule.as_str()), ("diffusion.switch_step", "30 is past the request's 20 steps"));
}

#[test]
fn a_guidance_knob_counts_for_cfg_and_expert_adapters_need_the_schema() {
    let mut r = req();
    r.diffusion.guidance_scale = Some(1.0);
    assert!(!r.resolve(&limits(), || 0).unwrap().does_cfg());
    r.diffusion.set_knob("guidance_scale_2", Some(3.0));
    assert!(r.resolve(&two_experts(), || 0).unwrap().does_cfg());
    let mut r = req();
    let lora = r#"{"name": "a", "expert": "low_noise"}"#;
    r.lora.push(serde_json::from_str(lora).unwrap());
    assert!(r.resolve(&two_experts(), || 0).is_ok());
    let e = r.resolve(&limits(), || 0).unwrap_err();
    assert_eq!(e.field, "lora[0].expert");
    assert!(e.rule.contains("one transformer"), "{e}");
    // A loop of a two-stage recipe is not an expert.
    r.lora[0].expert = Some(crate::LoraExpert::Refine);
    let e = r.resolve(&two_experts(), || 0).unwrap_err();
    assert!(e.field == "lora[0].expert" && e.rule.contains("`high_noise` or `low_noise` here"), "{e}");
}

#[test]
fn the_knob_schema_is_served_with_the_limits() {
    let v = serde_json::to_value(two_experts()).unwrap();
    assert_eq!(v["defaults"]["knobs"]["knobs"][0]["name"], "boundary_ratio");
    assert_eq!(serde_json::from_value::<ModelLimits>(v).unwrap(), two_experts());
    // A model without knobs serves none.
    assert!(serde_json::to_value(limits()).unwrap()["defaults"].get("knobs").is_none());
}
