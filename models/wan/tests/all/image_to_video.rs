//! Image-to-video and first-and-last-frame parity against diffusers/transformers on CPU, float32:
//! the CLIP image encoder (its processor: fastvideo-layers' tests), the transformer's image path, the conditioning
//! latents, and both pipelines end to end on the same initial noise. Fixtures come from
//! tests/fixtures/make_i2v_fixtures.py. Error measure: max |ours - reference| / max |reference|.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use fastvideo_layers::image_processor::Rgb8;
use fastvideo_pipeline::{PipelineRun, Value, Values};
use fastvideo_request::{ImageRole, InputImage, InputPart, OmniRequest, TaskType, TextRole};
use fastvideo_wan::image_condition::image_condition;
use fastvideo_wan::pipeline::{self, values};
use fastvideo_wan::WanModel;
use tch::{Device, Kind, Tensor};

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn fx(name: &str) -> &'static Tensor {
    crate::common::fixture("wan_i2v.safetensors", name)
}

fn load(folder: &str) -> WanModel {
    WanModel::load(&fixture_dir().join(folder), Device::Cpu).expect("tiny model loads")
}

fn rel_err(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.size(), b.size(), "shape mismatch");
    let diff = (a - b).abs().max().double_value(&[]);
    diff / b.abs().max().double_value(&[]).max(1e-12)
}

/// A `[H, W, 3]` uint8 fixture as a request's picture.
fn picture(name: &str, role: ImageRole) -> InputImage {
    let t = fx(name);
    let (h, w, _) = t.size3().unwrap();
    InputImage { role, width: w as u32, height: h as u32, rgb: Vec::<u8>::try_from(t.flatten(0, -1)).unwrap() }
}

#[test]
fn clip_vision_encoder_matches_transformers() {
    let m = load("tiny-wan-i2v");
    let enc = &m.image.as_ref().and_then(|i| i.clip.as_ref()).expect("a Wan 2.1 image-to-video model").encoder;
    let out = tch::no_grad(|| enc.penultimate(fx("clip.pixel_values"))).unwrap();
    let e = rel_err(&out, fx("clip.penultimate"));
    eprintln!("clip penultimate: relative error {e:.3e}");
    assert!(e < 1e-5, "clip relative error {e}"); // tolerance 1e-5 (float32, 2 layers)
}

#[test]
fn image_to_video_transformers_match_diffusers() {
    for (folder, image, out) in [
        ("tiny-wan-i2v", "transformer.image_i2v", "transformer.out_i2v"),
        ("tiny-wan-flf2v", "transformer.image_flf2v", "transformer.out_flf2v"),
    ] {
        let m = load(folder);
        let got = tch::no_grad(|| {
            m.transformer.forward_hooked(
                fx("transformer.hidden_states"),
                fx("transformer.timestep"),
                fx("transformer.encoder_hidden_states"),
                Some(fx(image)),
                None,
            )
        })
        .unwrap();
        let e = rel_err(&got, fx(out));
        eprintln!("{folder} transformer: relative error {e:.3e}");
        assert!(e < 1e-4, "{folder} transformer relative error {e}"); // tolerance 1e-4, as for T2V
    }
}

#[test]
fn the_transformer_refuses_a_missing_or_misshapen_image() {
    let m = load("tiny-wan-flf2v");
    let (x, t, c) =
        (fx("transformer.hidden_states"), fx("transformer.timestep"), fx("transformer.encoder_hidden_states"));
    let err = m.transformer.forward(x, t, c).unwrap_err().to_string();
    assert!(err.contains("needs image embeddings"), "{err}");
    // One picture where FLF2V needs two.
    let err = m.transformer.forward_hooked(x, t, c, Some(fx("transformer.image_i2v")), None).unwrap_err().to_string();
    assert!(err.contains("first-and-last-frame"), "{err}");
}

#[test]
fn conditioning_latents_match_diffusers() {
    for (folder, name, last) in [("tiny-wan-i2v", "i2v", None), ("tiny-wan-flf2v", "flf2v", Some(fx("condition.last")))]
    {
        let m = load(folder);
        let got = tch::no_grad(|| image_condition(&m.vae, fx("condition.first"), last, 9)).unwrap();
        let e = rel_err(&got, fx(&format!("condition.{name}")));
        eprintln!("{name} condition: relative error {e:.3e}");
        assert!(e < 1e-5, "{name} condition relative error {e}"); // tolerance 1e-5 (VAE encode, float32)
    }
}

fn request(task: TaskType) -> OmniRequest {
    let mut r = OmniRequest::text_to_video("i2v-parity", "a red circle moving left on a white background");
    r.task = task;
    r.inputs.push(InputPart::Text { text: "blurry low quality".into(), role: TextRole::Negative });
    r.diffusion.height = Some(32);
    r.diffusion.width = Some(32);
    r.diffusion.num_frames = Some(9);
    r.diffusion.num_inference_steps = Some(4);
    r.diffusion.guidance_scale = Some(5.0);
    r.outputs.return_latents = true;
    r
}

/// The request resolved as text, then given the task and pictures as `resolve` would attach them
/// from image inputs (the fixtures hold raw pixels, not files).
fn i2v_request(m: &WanModel) -> fastvideo_request::ResolvedRequest {
    let mut limits = m.limits();
    limits.tasks.push(TaskType::T2v);
    let mut req = request(TaskType::T2v).resolve(&limits, || 0).unwrap();
    req.task = TaskType::I2v;
    req
}

#[test]
fn image_to_video_pipelines_match_diffusers_end_to_end() {
    for (folder, name, with_last) in [("tiny-wan-i2v", "i2v", false), ("tiny-wan-flf2v", "flf2v", true)] {
        let m = load(folder);
        let spec = Arc::new(pipeline::text_to_video(&m, pipeline::default_guidance()).unwrap());
        let mut req = i2v_request(&m);
        req.images.push(picture("pipeline.first", ImageRole::FirstFrame));
        if with_last {
            req.images.push(picture("pipeline.last", ImageRole::LastFrame));
        }
        let mut init = Values::default();
        init.insert(values::INITIAL_LATENTS, Value::Tensor(fx("pipeline.latents_in").shallow_clone()));
        let (out, _) = crate::common::run_pipeline(spec, req, init);
        assert_eq!(out.metrics.forwards, 8, "CFG runs two forwards per step");
        let (latents, video) = (fx(&format!("pipeline.{name}.latents_out")), fx(&format!("pipeline.{name}.video")));
        crate::common::assert_matches_reference(name, &out, latents, video);
    }
}

#[test]
fn an_image_request_is_checked_against_the_model() {
    // A text-to-video model does not take image-to-video requests; an I2V model needs its image.
    let t2v = load("tiny-wan");
    let err = request(TaskType::I2v).resolve(&t2v.limits(), || 0).unwrap_err().to_string();
    assert!(err.contains("i2v"), "{err}");
    let m = load("tiny-wan-flf2v");
    let spec = Arc::new(pipeline::text_to_video(&m, pipeline::default_guidance()).unwrap());
    let mut req = i2v_request(&m);
    req.images.push(picture("pipeline.first", ImageRole::FirstFrame));
    let mut run = PipelineRun::new(spec, req, Device::Cpu, Values::default(), Default::default());
    let err = format!("{:#}", run.run_to_end(&mut |_| {}).unwrap_err());
    assert!(err.contains("last_frame"), "{err}");
}

#[test]
fn pictures_are_stretched_to_the_output_size_as_diffusers_does() {
    // PIL's Lanczos on 8 bits; ours computes the same weights in float and rounds the same way,
    // so a pixel may land one 8-bit level away (2/255 in [-1, 1]).
    let im = picture("resize.image", ImageRole::FirstFrame);
    let ours =
        fastvideo_wan::image_resize::picture_to_unit(&im, fastvideo_request::ResizeMode::Stretch, 32, 48, Device::Cpu)
            .unwrap();
    let reference = fx("resize.out");
    assert_eq!(ours.size(), reference.size());
    let diff = (&ours - reference).abs();
    let (max, off) = (diff.max().double_value(&[]), diff.gt(1e-6).sum(Kind::Float).double_value(&[]));
    eprintln!("resize: max abs error {max:.3e}, {off} of {} values off", reference.numel());
    assert!(max <= 2.0 / 255.0 + 1e-6, "resize max abs error {max}"); // tolerance one 8-bit level
}

#[test]
fn video_to_video_matches_diffusers_end_to_end() {
    // The text-to-video tiny model, 9 frames, 5 steps at strength 0.6: the loop starts at step 2
    // from the encoded video noised with the recorded noise.
    let m = load("tiny-wan");
    let spec = Arc::new(pipeline::text_to_video(&m, pipeline::default_guidance()).unwrap());
    let mut r = request(TaskType::T2v);
    r.diffusion.num_inference_steps = Some(5);
    r.node_params.insert("text_encode".into(), serde_json::json!({"max_sequence_length": 16}));
    let mut req = r.resolve(&m.limits(), || 0).unwrap();
    let frames = fx("v2v.video");
    let (f, h, w, _) = frames.size4().unwrap();
    req.task = TaskType::V2v;
    req.strength = 0.6;
    req.video = Some(fastvideo_request::InputVideo {
        width: w as u32,
        height: h as u32,
        fps: 16.0,
        frames: f as u32,
        rgb: Vec::<u8>::try_from(frames.flatten(0, -1)).unwrap(),
    });
    assert_eq!(req.start_step(), 2, "diffusers' get_timesteps: 5 - int(5 * 0.6)");
    let mut init = Values::default();
    init.insert(values::INITIAL_LATENTS, Value::Tensor(fx("v2v.noise").shallow_clone()));
    let (out, progress) = crate::common::run_pipeline(spec, req, init);
    assert_eq!(progress, 3, "three of the five steps run");
    assert_eq!(out.metrics.forwards, 6, "CFG runs two forwards per step run");
    crate::common::assert_matches_reference("v2v", &out, fx("v2v.latents_out"), fx("v2v.video_out"));
}

/// Fixture case 0 of clip_pil_processor.safetensors (make_clip_pil_fixture.py): its picture and
/// what transformers' `CLIPImageProcessorPil` made of it with the tiny folder's config.
fn pil_case() -> (Vec<u8>, u32, u32, &'static Tensor) {
    let fx = |what: &str| crate::common::fixture("clip_pil_processor.safetensors", &format!("0.a.{what}"));
    let (h, w, _) = fx("picture").size3().unwrap();
    (Vec::<u8>::try_from(fx("picture").flatten(0, -1)).unwrap(), w as u32, h as u32, fx("pixel_values"))
}

#[test]
fn a_folder_saved_without_torchvision_runs_the_pil_processor() {
    use fastvideo_layers::image_processor::ProcessorBackend;
    // transformers 5 without torchvision saves `CLIPImageProcessorPil` in model_index.json
    // (issue 54: refused by name); its preprocessor_config.json is the same as the torchvision
    // processor's. The PIL backend's parity on every case is fastvideo-layers' test.
    let dir = tempfile::tempdir().unwrap();
    crate::common::copy_dir(&fixture_dir().join("tiny-wan-i2v"), dir.path());
    let index = dir.path().join("model_index.json");
    let text = std::fs::read_to_string(&index).unwrap().replace("\"CLIPImageProcessor\"", "\"CLIPImageProcessorPil\"");
    std::fs::write(&index, text).unwrap();
    let m = WanModel::load(dir.path(), Device::Cpu).expect("a folder naming CLIPImageProcessorPil loads");
    let p = &m.image.as_ref().and_then(|i| i.clip.as_ref()).unwrap().processor;
    assert_eq!(p.backend, ProcessorBackend::Pil);
    let (rgb, w, h, want) = pil_case();
    let out = p.preprocess(&[Rgb8 { width: w, height: h, data: &rgb }], Device::Cpu).unwrap();
    let d = (out.squeeze_dim(0) - want).abs().max().double_value(&[]);
    assert_eq!(d, 0.0, "PIL's resize to the bit: max abs error {d}");
}
