//! End-to-end parity with diffusers' `Cosmos3OmniPipeline` on the tiny folder, from the same
//! initial latents (fixtures: make_cosmos3_fixtures.py): the prompt ids the templates and chat
//! template make, the final latents of text to video with sound and of text to image, and the
//! decoded frames.

use std::sync::Arc;

use fastvideo_cosmos3::values::{CONDITION_LATENTS, LATENTS, NEGATIVE_IDS, PROMPT_IDS, SOUND_LATENTS};
use fastvideo_cosmos3::{pipeline, Cosmos3Model};
use fastvideo_pipeline::{PipelineRun, Value, Values};
use fastvideo_request::{
    Artifact, ImageRole, InputImage, OmniEvent, OmniOutput, OmniRequest, ResolvedRequest, TaskType,
};
use tch::{Device, Kind, Tensor};

use crate::common::{fixture, input_video, ints, load, max_abs, rel};

/// float32 on both sides: final latents within 1e-4 relative (3 steps of a 2-layer model; the
/// transformer alone agrees to ~3e-6), frames within half an 8-bit step.
const LATENT_TOL: f64 = 1e-4;

fn model() -> Cosmos3Model {
    Cosmos3Model::load(&fixture("tiny-cosmos3"), Device::Cpu, Kind::Float, Kind::Float).unwrap()
}

/// What the run wrote besides its artifacts.
struct Kept {
    cond: Option<Vec<i64>>,
    uncond: Option<Vec<i64>>,
    sound: Option<Tensor>,
    condition: Option<Tensor>,
}

fn run(model: &Cosmos3Model, req: ResolvedRequest, init: Values) -> (OmniOutput, Kept) {
    let spec = Arc::new(pipeline::spec(model).unwrap());
    let mut run = PipelineRun::new(spec, req, Device::Cpu, init, Default::default());
    let mut progress = 0;
    run.run_to_end(&mut |e| progress += matches!(e, OmniEvent::Progress { .. }) as u32).unwrap();
    let ids = |name: &str| run.values().opt_tensor(name).map(ints);
    let copy = |name: &str| run.values().opt_tensor(name).map(Tensor::copy);
    let kept = Kept {
        cond: ids(PROMPT_IDS),
        uncond: ids(NEGATIVE_IDS),
        sound: copy(SOUND_LATENTS),
        condition: copy(CONDITION_LATENTS),
    };
    (run.finish(&mut |_| {}).unwrap(), kept)
}

fn latents_of(out: &OmniOutput) -> Tensor {
    let Some(Artifact::Latents(l)) = out.artifacts.get("latents") else { panic!("no latents returned") };
    Tensor::from_slice(&l.data).view(l.shape.as_slice())
}

fn frames_error(out: &OmniOutput, video: &Tensor) -> f64 {
    let v = out.video().expect("video artifact");
    let ours = Tensor::from_slice(&v.rgb).view([v.num_frames as i64, v.height as i64, v.width as i64, 3]);
    max_abs(&(ours.to_kind(Kind::Float) / 255.0), video)
}

#[test]
fn text_to_video_with_sound_matches_diffusers() {
    let m = model();
    let f = load("cosmos3/t2v_sound.safetensors");
    let mut r = OmniRequest::text_to_video("t2v", "a robot arm stacks red blocks");
    r.diffusion.height = Some(48);
    r.diffusion.width = Some(64);
    r.diffusion.num_frames = Some(5);
    r.diffusion.fps = Some(16);
    r.diffusion.num_inference_steps = Some(3);
    r.diffusion.guidance_scale = Some(6.0);
    r.outputs.return_latents = true;
    let req = r.resolve(&m.limits(), || 0).unwrap();
    assert!(req.generate_sound, "a model with sound makes sound by default");
    let mut init = Values::default();
    init.insert(LATENTS, Value::Tensor(f["latents"].shallow_clone()));
    init.insert(SOUND_LATENTS, Value::Tensor(f["sound_latents"].shallow_clone()));
    let (out, kept) = run(&m, req, init);
    assert_eq!(kept.cond.unwrap(), ints(&f["cond_ids"]), "prompt ids");
    assert_eq!(kept.uncond.unwrap(), ints(&f["uncond_ids"]), "negative prompt ids");
    let e = rel(&latents_of(&out), &f["final_latents"]);
    let s = rel(&kept.sound.expect("sound latents"), &f["sound_latents_out"]);
    let v = frames_error(&out, &f["video"]);
    eprintln!("t2v+sound: latents rel {e:.2e}, sound latents rel {s:.2e}, frames max abs {v:.2e}");
    assert!(e < LATENT_TOL && s < LATENT_TOL, "latents {e:.2e}, sound {s:.2e}");
    assert!(v <= 0.5 / 255.0 + 1e-4, "frames {v:.2e}");
    assert_eq!(out.metrics.forwards, 6, "two branches per step, batched, counted per branch");
    let Some(Artifact::Audio(a)) = out.artifacts.get("audio") else { panic!("no audio artifact") };
    assert_eq!((a.sample_rate, a.channels), (8000, 2));
    let ours = Tensor::from_slice(&a.samples).view([-1, 2]).tr();
    assert_eq!(ours.size(), f["sound"].size(), "waveform shape (not trimmed, as the reference)");
    // The tiny random decoder amplifies float32 rounding chaotically (~1e4-fold; diffusers' own
    // float32 and float64 waveforms differ by 6e-3), so a few samples may land elsewhere: the
    // decoder's parity is tested in float64 (sound.rs); here the share of samples within 1e-2
    // checks the plumbing (a swapped channel or wrong latent leaves few).
    let close = (&ours - &f["sound"]).abs().le(1e-2).to_kind(Kind::Float).mean(Kind::Float).double_value(&[]);
    eprintln!("t2v+sound: {:.1}% of waveform samples within 1e-2", close * 100.0);
    assert!(close > 0.95, "waveform: only {:.1}% of samples within 1e-2", close * 100.0);
}

#[test]
fn text_to_image_matches_diffusers() {
    let m = model();
    let f = load("cosmos3/t2i.safetensors");
    let mut r = OmniRequest::text_to_video("t2i", "a red cube");
    r.task = fastvideo_request::TaskType::T2i;
    r.diffusion.height = Some(32);
    r.diffusion.width = Some(48);
    r.diffusion.num_frames = Some(1);
    r.diffusion.num_inference_steps = Some(2);
    r.diffusion.guidance_scale = Some(4.0);
    r.outputs.return_latents = true;
    let req = r.resolve(&m.limits(), || 0).unwrap();
    let mut init = Values::default();
    init.insert(LATENTS, Value::Tensor(f["latents"].shallow_clone()));
    let (out, kept) = run(&m, req, init);
    assert_eq!(kept.cond.unwrap(), ints(&f["cond_ids"]), "prompt ids");
    assert!(kept.sound.is_none(), "a picture has no sound");
    let e = rel(&latents_of(&out), &f["final_latents"]);
    let v = frames_error(&out, &f["video"]);
    eprintln!("t2i: latents rel {e:.2e}, frames max abs {v:.2e}");
    assert!(e < LATENT_TOL, "latents {e:.2e}");
    assert!(v <= 0.5 / 255.0 + 1e-4, "frames {v:.2e}");
}

/// Image to video and video continuation: the resolved request of `task` at the fixture's size.
fn conditioned_request(m: &Cosmos3Model, task: TaskType) -> ResolvedRequest {
    let mut r = OmniRequest::text_to_video("cond", "a red cube slides");
    r.diffusion.height = Some(32);
    r.diffusion.width = Some(48);
    r.diffusion.num_frames = Some(9);
    r.diffusion.fps = Some(16);
    r.diffusion.num_inference_steps = Some(2);
    r.diffusion.guidance_scale = Some(6.0);
    r.outputs.return_latents = true;
    r.outputs.generate_sound = Some(false);
    let mut req = r.resolve(&m.limits(), || 0).unwrap();
    req.task = task;
    req
}

/// Runs a conditioned case from the fixture's initial latents (verbatim, as `--noise` gives
/// them) and checks our conditioning latents against the clean frames diffusers mixed in, the
/// final latents and the frames.
fn check_conditioned(name: &str, req: ResolvedRequest, f: &std::collections::HashMap<String, Tensor>, clean: &[i64]) {
    let m = model();
    let mut init = Values::default();
    init.insert(LATENTS, Value::Tensor(f["latents"].shallow_clone()));
    let (out, kept) = run(&m, req, init);
    let x0 = kept.condition.expect("condition latents");
    let idx = Tensor::from_slice(clean);
    let c = max_abs(&x0.index_select(2, &idx), &f["latents"].index_select(2, &idx));
    let e = rel(&latents_of(&out), &f["final_latents"]);
    let v = frames_error(&out, &f["video_out"]);
    eprintln!("{name}: clean latents max abs {c:.2e}, final latents rel {e:.2e}, frames max abs {v:.2e}");
    // The VAE encode in float32 on both sides (the transformer's tolerance above for the rest).
    assert!(c < 1e-4, "{name}: clean latents {c:.2e}");
    assert!(e < LATENT_TOL, "{name}: latents {e:.2e}");
    assert!(v <= 0.5 / 255.0 + 1e-4, "{name}: frames {v:.2e}");
}

#[test]
fn image_to_video_matches_diffusers() {
    let f = load("cosmos3/i2v.safetensors");
    let mut req = conditioned_request(&model(), TaskType::I2v);
    let image = &f["image"];
    let (h, w, _) = image.size3().unwrap();
    req.images = vec![InputImage {
        role: ImageRole::FirstFrame,
        width: w as u32,
        height: h as u32,
        rgb: Vec::<u8>::try_from(image.reshape([-1])).unwrap(),
    }];
    check_conditioned("i2v", req, &f, &[0]);
}

#[test]
fn video_continuation_matches_diffusers() {
    let f = load("cosmos3/v2v.safetensors");
    let mut req = conditioned_request(&model(), TaskType::V2v);
    req.video = Some(input_video(&f["video"], 16.0));
    check_conditioned("v2v", req, &f, &[0, 1]);
}

/// Requests the pipeline cannot honour fail with a line naming what to change, never a panic:
/// a continuation with no frame after the kept ones, image to video of one frame, another
/// solver, and latents under a name the request does not denoise.
#[test]
fn requests_it_cannot_run_fail_naming_the_field() {
    let m = model();
    let spec = Arc::new(pipeline::spec(&m).unwrap());
    let fails = |req: ResolvedRequest, init: Values| -> String {
        let mut run = PipelineRun::new(spec.clone(), req, Device::Cpu, init, Default::default());
        format!("{:#}", run.run_to_end(&mut |_| {}).unwrap_err())
    };
    let f = load("cosmos3/v2v.safetensors");
    let mut req = conditioned_request(&m, TaskType::V2v);
    req.num_frames = 5;
    req.video = Some(input_video(&f["video"], 16.0));
    let e = fails(req, Values::default());
    assert!(e.contains("diffusion.num_frames: 5"), "{e}");
    let mut req = conditioned_request(&m, TaskType::I2v);
    req.num_frames = 1;
    let image = &load("cosmos3/i2v.safetensors")["image"];
    let (h, w, _) = image.size3().unwrap();
    let rgb = Vec::<u8>::try_from(image.reshape([-1])).unwrap();
    req.images = vec![InputImage { role: ImageRole::FirstFrame, width: w as u32, height: h as u32, rgb }];
    assert!(fails(req, Values::default()).contains("diffusion.num_frames"));
    let mut req = conditioned_request(&m, TaskType::T2v);
    req.sampler = fastvideo_request::SamplerKind::Euler;
    assert!(fails(req, Values::default()).contains("sampling.sampler"));
    let mut req = conditioned_request(&m, TaskType::T2v);
    req.named_noise.insert("action_latents".into(), fastvideo_request::LatentInput { shape: vec![1], data: vec![0.0] });
    assert!(fails(req, Values::default()).contains("`action_latents`"));
}
