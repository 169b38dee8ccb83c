//! The action modes against `Cosmos3OmniPipeline` with a `CosmosActionCondition` (fixtures:
//! make_cosmos3_fixtures.py, embodiment `pusht`, chunk 4, tier 256): the JSON caption's ids,
//! the clip fitted into the canvas and encoded (checked through the clean latent frames
//! diffusers mixed in), the final video latents and the predicted actions, from the same
//! initial latents; and the request plane's refusals.

use std::collections::HashMap;
use std::sync::Arc;

use base64::Engine;
use fastvideo_cosmos3::values::{ACTION_LATENTS, CONDITION_LATENTS, LATENTS, NEGATIVE_IDS, PROMPT_IDS};
use fastvideo_cosmos3::{pipeline, Cosmos3Model};
use fastvideo_pipeline::{PipelineRun, Value, Values};
use fastvideo_request::{
    ActionCondition, Artifact, ImageRole, InputPart, OmniOutput, OmniRequest, ResolvedRequest, TaskType,
};
use tch::{Device, Kind, Tensor};

use crate::common::{fixture, input_video, ints, load, max_abs, rel};

/// float32 on both sides, as the other pipeline cases.
const TOL: f64 = 1e-4;

fn model() -> Cosmos3Model {
    Cosmos3Model::load(&fixture("tiny-cosmos3"), Device::Cpu, Kind::Float, Kind::Float).unwrap()
}

fn png_b64(rgb: &Tensor) -> String {
    let (h, w, _) = rgb.size3().unwrap();
    let data = Vec::<u8>::try_from(rgb.reshape([-1])).unwrap();
    let img = image::RgbImage::from_raw(w as u32, h as u32, data).unwrap();
    let mut bytes = std::io::Cursor::new(Vec::new());
    img.write_to(&mut bytes, image::ImageFormat::Png).unwrap();
    base64::engine::general_purpose::STANDARD.encode(bytes.into_inner())
}

fn request(task: TaskType, picture: &Tensor, raw: Option<&Tensor>) -> OmniRequest {
    let mut r = OmniRequest::text_to_video("act", "push the block to the goal");
    r.task = task;
    r.inputs.push(InputPart::Image { path: None, b64: Some(png_b64(picture)), role: ImageRole::FirstFrame });
    r.diffusion.fps = Some(16);
    r.diffusion.num_inference_steps = Some(2);
    r.diffusion.guidance_scale = Some(6.0);
    r.diffusion.action = Some(ActionCondition {
        domain_name: "pusht".into(),
        chunk_size: 4,
        resolution_tier: Some(256),
        view_point: Some("third_person_view".into()),
        raw_actions: raw.map(|t| Vec::<Vec<f32>>::try_from(t).unwrap()),
    });
    r.outputs.return_latents = true;
    r.outputs.generate_sound = Some(false);
    r
}

fn check(name: &str, req: ResolvedRequest, f: &HashMap<String, Tensor>) -> OmniOutput {
    let m = model();
    let mut init = Values::default();
    init.insert(LATENTS, Value::Tensor(f["latents"].shallow_clone()));
    init.insert(ACTION_LATENTS, Value::Tensor(f["action_latents"].shallow_clone()));
    let spec = Arc::new(pipeline::spec(&m).unwrap());
    let mut run = PipelineRun::new(spec, req, Device::Cpu, init, Default::default());
    run.run_to_end(&mut |_| {}).unwrap();
    let v = run.values();
    assert_eq!(ints(v.tensor(PROMPT_IDS).unwrap()), ints(&f["cond_ids"]), "{name}: caption ids");
    assert_eq!(ints(v.tensor(NEGATIVE_IDS).unwrap()), ints(&f["uncond_ids"]), "{name}: negative ids");
    let x0 = v.tensor(CONDITION_LATENTS).unwrap().copy();
    let out = run.finish(&mut |_| {}).unwrap();
    let clean: Vec<i64> = if name == "inverse_dynamics" { vec![0, 1] } else { vec![0] };
    let idx = Tensor::from_slice(&clean);
    let c = max_abs(&x0.index_select(2, &idx), &f["latents"].index_select(2, &idx));
    let Some(Artifact::Latents(l)) = out.artifacts.get("latents") else { panic!("no latents") };
    let ours = Tensor::from_slice(&l.data).view(l.shape.as_slice());
    let e = rel(&ours, &f["final_latents"]);
    eprintln!("{name}: clean latents max abs {c:.2e}, final latents rel {e:.2e}");
    assert!(c < 1e-4, "{name}: clean latents {c:.2e}");
    assert!(e < TOL, "{name}: final latents {e:.2e}");
    let video = out.video().expect("video");
    let shape = ints(&f["video_shape"]);
    assert_eq!(
        [video.num_frames as i64, video.height as i64, video.width as i64],
        [shape[0], shape[1], shape[2]],
        "{name}: the video is the content's crop"
    );
    out
}

fn check_actions(name: &str, out: &OmniOutput, f: &HashMap<String, Tensor>) {
    let a = out.actions().expect("an action artifact");
    let ours = Tensor::from_slice(&a.data).view(a.shape.as_slice());
    let e = rel(&ours, &f["action_out"]);
    eprintln!("{name}: actions rel {e:.2e}");
    assert!(e < TOL, "{name}: actions {e:.2e}");
}

#[test]
fn policy_matches_diffusers() {
    let m = model();
    let f = load("cosmos3/action_policy.safetensors");
    let req = request(TaskType::Policy, &f["image"], None).resolve(&m.limits(), || 0).unwrap();
    assert_eq!((req.height, req.width, req.num_frames), (256, 320, 5), "the tier's canvas, chunk + 1 frames");
    let out = check("policy", req, &f);
    check_actions("policy", &out, &f);
}

#[test]
fn forward_dynamics_matches_diffusers() {
    let m = model();
    let f = load("cosmos3/action_forward_dynamics.safetensors");
    let req = request(TaskType::ForwardDynamics, &f["image"], Some(&f["raw_actions"])).resolve(&m.limits(), || 0);
    let out = check("forward_dynamics", req.unwrap(), &f);
    assert!(out.actions().is_none(), "forward dynamics predicts no actions");
}

#[test]
fn inverse_dynamics_matches_diffusers() {
    let m = model();
    let f = load("cosmos3/action_inverse_dynamics.safetensors");
    let video = &f["video"];
    // The canvas comes from the picture's size: resolve with the first frame, then give the
    // whole clip (an MP4 input would be decoded lossily).
    let mut req = request(TaskType::Policy, &video.get(0), None).resolve(&m.limits(), || 0).unwrap();
    req.task = TaskType::InverseDynamics;
    req.images.clear();
    req.video = Some(input_video(video, 16.0));
    let out = check("inverse_dynamics", req, &f);
    check_actions("inverse_dynamics", &out, &f);
}

#[test]
fn bad_action_conditions_are_refused_naming_the_field() {
    let m = model();
    let picture = Tensor::zeros([48, 64, 3], (Kind::Uint8, Device::Cpu));
    let refuse = |r: OmniRequest| r.resolve(&m.limits(), || 0).unwrap_err();
    let mut r = request(TaskType::Policy, &picture, None);
    r.diffusion.action.as_mut().unwrap().domain_name = "mars_rover".into();
    let e = refuse(r);
    assert_eq!(e.field, "diffusion.action.domain_name");
    assert!(e.rule.contains("mars_rover") && e.rule.contains("pusht"), "{}", e.rule);
    let wide = Tensor::zeros([3, 3], (Kind::Float, Device::Cpu));
    let e = refuse(request(TaskType::ForwardDynamics, &picture, Some(&wide)));
    assert_eq!(e.field, "diffusion.action.raw_actions[0]");
    assert!(e.rule.contains("2 wide"), "{}", e.rule);
    let e = refuse(request(TaskType::ForwardDynamics, &picture, None));
    assert_eq!(e.field, "diffusion.action.raw_actions");
    let mut r = request(TaskType::Policy, &picture, None);
    r.diffusion.action.as_mut().unwrap().chunk_size = 6;
    assert_eq!(refuse(r).field, "diffusion.action.chunk_size");
    let mut r = request(TaskType::Policy, &picture, None);
    r.diffusion.action.as_mut().unwrap().resolution_tier = Some(300);
    assert_eq!(refuse(r).field, "diffusion.action.resolution_tier");
    let mut r = request(TaskType::Policy, &picture, None);
    r.diffusion.height = Some(256);
    assert_eq!(refuse(r).field, "diffusion.height");
    let mut r = request(TaskType::Policy, &picture, None);
    r.diffusion.action = None;
    assert_eq!(refuse(r).field, "diffusion.action");
}
