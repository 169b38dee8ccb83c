//! Wan 2.2's two-expert (A14B-style) pipelines against diffusers on CPU, float32: text-to-video
//! and image-to-video end to end on the same noise, with the switch from the high-noise to the
//! low-noise expert inside the schedule; the request's own boundary and second guidance scale;
//! the route each step takes; batching that never mixes experts; loading errors. Fixtures come
//! from tests/fixtures/make_wan22_fixtures.py. Error measure: max |ours - reference| / max |reference|.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use fastvideo_pipeline::{
    Advance, LoopPolicies, Observed, Observer, ObserverState, PipelineRun, PluginMeter, Value, Values,
};
use fastvideo_request::{
    Artifact, ImageRole, InputImage, InputPart, OmniEvent, OmniRequest, ResolvedRequest, TaskType, TextRole,
};
use fastvideo_wan::lora_keys::WanKeys;
use fastvideo_wan::pipeline::{self, values};
use fastvideo_wan::WanModel;
use tch::{Device, Tensor};

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn fx(name: &str) -> &'static Tensor {
    crate::common::fixture("wan22.safetensors", name)
}

fn load(folder: &str) -> WanModel {
    WanModel::load(&fixture_dir().join(folder), Device::Cpu).expect("tiny model loads")
}

/// The fixtures' run: 32x32, 9 frames, 6 steps (timesteps 999, 937, 857, 750, 600, 376).
fn request(task: TaskType, guidance: f32, guidance_2: Option<f32>) -> OmniRequest {
    let mut r = OmniRequest::text_to_video("wan22", "a red circle moving left on a white background");
    r.task = task;
    r.inputs.push(InputPart::Text { text: "blurry low quality".into(), role: TextRole::Negative });
    r.diffusion.height = Some(32);
    r.diffusion.width = Some(32);
    r.diffusion.num_frames = Some(9);
    r.diffusion.num_inference_steps = Some(6);
    r.diffusion.guidance_scale = Some(guidance);
    r.diffusion.set_knob("guidance_scale_2", guidance_2);
    r.outputs.return_latents = true;
    r
}

fn init(latents: &str) -> Values {
    let mut v = Values::default();
    v.insert(values::INITIAL_LATENTS, Value::Tensor(fx(latents).shallow_clone()));
    v
}

fn latents_of(out: &fastvideo_request::OmniOutput) -> Tensor {
    let Some(Artifact::Latents(l)) = out.artifacts.get("latents") else { panic!("latents returned") };
    Tensor::from_slice(&l.data).view(l.shape.as_slice())
}

fn rel_err(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.size(), b.size(), "shape mismatch");
    (a - b).abs().max().double_value(&[]) / b.abs().max().double_value(&[]).max(1e-12)
}

/// `req` as image to video from the `[H, W, 3]` uint8 fixture `name` as its first frame.
fn with_first_frame(req: &mut ResolvedRequest, name: &str) {
    req.task = TaskType::I2v;
    let first = fx(name);
    let (h, w, _) = first.size3().unwrap();
    req.images.push(InputImage {
        role: ImageRole::FirstFrame,
        width: w as u32,
        height: h as u32,
        rgb: Vec::<u8>::try_from(first.flatten(0, -1)).unwrap(),
    });
}

/// Records each step's expert and guidance scale as observers see them.
#[derive(Default, Clone)]
struct Routes(Arc<Mutex<Vec<(u32, f32)>>>);

impl Observer for Routes {
    fn init(&self, _req: &ResolvedRequest, _meter: &PluginMeter) -> anyhow::Result<Box<dyn ObserverState>> {
        Ok(Box::new(self.clone()))
    }
}

impl ObserverState for Routes {
    fn on_event(&mut self, e: Observed, _: Option<&Tensor>, _: &mut dyn FnMut(OmniEvent)) -> anyhow::Result<()> {
        if let Observed::StepStart(s) = e {
            self.0.lock().unwrap().push((s.expert, s.guidance_scale));
        }
        Ok(())
    }
}

fn run_t2v(m: &WanModel, r: OmniRequest) -> (fastvideo_request::OmniOutput, Vec<(u32, f32)>) {
    let routes = Routes::default();
    let policies =
        LoopPolicies { observers: vec![Arc::new(routes.clone())], ..LoopPolicies::new(pipeline::default_guidance()) };
    let spec = Arc::new(pipeline::text_to_video_with(m, policies).unwrap());
    let req = r.resolve(&m.limits(), || 0).unwrap();
    let (out, _) = crate::common::run_pipeline(spec, req, init("t2v.latents_in"));
    let seen = routes.0.lock().unwrap().clone();
    (out, seen)
}

#[test]
fn two_expert_text_to_video_matches_diffusers_end_to_end() {
    let m = load("tiny-wan22-t2v");
    let knobs = m.limits().defaults.knobs;
    let boundary = knobs.knob("boundary_ratio").expect("a two-expert model");
    assert_eq!(boundary.default, fastvideo_request::KnobDefault::Value(serde_json::json!(0.875)));
    let (out, routes) = run_t2v(&m, request(TaskType::T2v, 4.0, Some(3.0)));
    // Timesteps 999 and 937 are at or above 875: the high-noise expert with guidance 4; the
    // other four steps on the low-noise expert with guidance 3.
    assert_eq!(routes, [(0, 4.0), (0, 4.0), (1, 3.0), (1, 3.0), (1, 3.0), (1, 3.0)]);
    assert_eq!(out.metrics.forwards, 12, "CFG runs two forwards per step");
    crate::common::assert_matches_reference("a14b t2v", &out, fx("t2v.latents_out"), fx("t2v.video"));
}

#[test]
fn the_second_guidance_scale_and_the_boundary_follow_the_request() {
    let m = load("tiny-wan22-t2v");
    // No guidance_scale_2 (and none in the folder): the low-noise expert takes guidance_scale.
    let (out, routes) = run_t2v(&m, request(TaskType::T2v, 4.0, None));
    assert!(routes.iter().all(|&(_, g)| g == 4.0), "{routes:?}");
    let e = rel_err(&latents_of(&out), fx("t2v.latents_out_one_scale"));
    assert!(e < 1e-4, "one scale: relative error {e}"); // tolerance 1e-4, as the other pipelines
                                                        // The request's boundary 0.95: only timestep 999 is above 950.
    let mut r = request(TaskType::T2v, 4.0, Some(3.0));
    r.diffusion.set_knob("boundary_ratio", Some(0.95));
    let (out, routes) = run_t2v(&m, r);
    assert_eq!(routes.iter().filter(|(x, _)| *x == 0).count(), 1, "{routes:?}");
    let e = rel_err(&latents_of(&out), fx("t2v.latents_out_boundary_095"));
    assert!(e < 1e-4, "boundary 0.95: relative error {e}");
    // Boundary 0: the high-noise expert throughout.
    let mut r = request(TaskType::T2v, 4.0, Some(3.0));
    r.diffusion.set_knob("boundary_ratio", Some(0.0));
    let (out, routes) = run_t2v(&m, r);
    assert!(routes.iter().all(|&r| r == (0, 4.0)), "{routes:?}");
    let e = rel_err(&latents_of(&out), fx("t2v.latents_out_high_only"));
    assert!(e < 1e-4, "boundary 0: relative error {e}");
}

#[test]
fn a_switch_step_routes_by_step_index() {
    // Switching after step 2 is what the folder's boundary does on this schedule: the same run.
    let m = load("tiny-wan22-t2v");
    let mut r = request(TaskType::T2v, 4.0, Some(3.0));
    r.diffusion.set_knob("switch_step", Some(2));
    let (out, routes) = run_t2v(&m, r);
    assert_eq!(routes, [(0, 4.0), (0, 4.0), (1, 3.0), (1, 3.0), (1, 3.0), (1, 3.0)]);
    let e = rel_err(&latents_of(&out), fx("t2v.latents_out"));
    assert!(e < 1e-4, "switch step 2: relative error {e}");
    let mut r = request(TaskType::T2v, 4.0, Some(3.0));
    r.diffusion.set_knob("switch_step", Some(5));
    let (_, routes) = run_t2v(&m, r);
    assert_eq!(routes.iter().map(|r| r.0).collect::<Vec<_>>(), [0, 0, 0, 0, 0, 1]);
}

#[test]
fn two_expert_image_to_video_matches_diffusers_end_to_end() {
    let m = load("tiny-wan22-i2v");
    assert!(m.image.as_ref().is_some_and(|i| i.clip.is_none()), "Wan 2.2 I2V has no image encoder");
    let spec = Arc::new(pipeline::text_to_video(&m, pipeline::default_guidance()).unwrap());
    let mut limits = m.limits();
    limits.tasks.push(TaskType::T2v);
    let mut req = request(TaskType::T2v, 5.0, Some(2.5)).resolve(&limits, || 0).unwrap();
    with_first_frame(&mut req, "i2v.first");
    let (out, _) = crate::common::run_pipeline(spec, req, init("i2v.latents_in"));
    crate::common::assert_matches_reference("a14b i2v", &out, fx("i2v.latents_out"), fx("i2v.video"));
}

#[test]
fn a_batch_never_mixes_experts() {
    let m = load("tiny-wan22-t2v");
    let spec = Arc::new(pipeline::text_to_video(&m, pipeline::default_guidance()).unwrap());
    let run = |boundary: f32| {
        let mut r = request(TaskType::T2v, 4.0, Some(3.0));
        r.diffusion.set_knob("boundary_ratio", Some(boundary));
        r.sampling.seed = Some(1);
        let req = r.resolve(&m.limits(), || 0).unwrap();
        PipelineRun::new(spec.clone(), req, Device::Cpu, Values::default(), Default::default())
    };
    let (mut a, mut b) = (run(0.875), run(0.95));
    // To the loop's first step: both on the high-noise expert, so they may share a forward.
    for r in [&mut a, &mut b] {
        while r.batch_key().is_none() {
            assert!(matches!(r.advance(&mut |_| {}).unwrap(), Advance::Worked));
        }
    }
    assert_eq!(a.batch_key(), b.batch_key());
    a.advance(&mut |_| {}).unwrap();
    b.advance(&mut |_| {}).unwrap();
    // Timestep 937: `a` stays on the high-noise expert, `b` (boundary 950) has switched.
    assert!(a.batch_key().is_some() && b.batch_key().is_some());
    assert_ne!(a.batch_key(), b.batch_key(), "steps on different experts never batch");
}

#[test]
fn a_broken_two_expert_folder_names_what_is_wrong() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("m");
    crate::common::copy_dir(&fixture_dir().join("tiny-wan22-t2v"), &dir);
    // The experts disagree on the text width.
    let cfg = dir.join("transformer_2/config.json");
    let text = std::fs::read_to_string(&cfg).unwrap().replace("\"text_dim\": 32", "\"text_dim\": 48");
    std::fs::write(&cfg, text).unwrap();
    let e = format!("{:#}", WanModel::load(&dir, Device::Cpu).err().unwrap());
    assert!(e.contains("transformer_2/config.json") && e.contains("text_dim"), "{e}");
    // A boundary without a second expert.
    std::fs::remove_dir_all(dir.join("transformer_2")).unwrap();
    let idx = dir.join("model_index.json");
    let text = std::fs::read_to_string(&idx).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut v = v.as_object().unwrap().clone();
    v.remove("transformer_2");
    std::fs::write(&idx, serde_json::to_string(&v).unwrap()).unwrap();
    let e = format!("{:#}", WanModel::load(&dir, Device::Cpu).err().unwrap());
    assert!(e.contains("boundary_ratio") && e.contains("transformer_2"), "{e}");
    // A boundary out of range.
    v.insert("boundary_ratio".into(), serde_json::json!(1.5));
    std::fs::write(&idx, serde_json::to_string(&v).unwrap()).unwrap();
    let e = format!("{:#}", WanModel::load(&dir, Device::Cpu).err().unwrap());
    assert!(e.contains("boundary_ratio") && e.contains("1.5"), "{e}");
}

#[test]
fn one_expert_models_refuse_the_expert_fields() {
    let m = load("tiny-wan");
    let mut r = request(TaskType::T2v, 4.0, None);
    r.diffusion.set_knob("boundary_ratio", Some(0.9));
    assert_eq!(r.resolve(&m.limits(), || 0).unwrap_err().field, "diffusion.boundary_ratio");
    let mut r = request(TaskType::T2v, 4.0, None);
    let expert = Some(fastvideo_request::LoraExpert::LowNoise);
    r.lora = vec![fastvideo_request::LoraChoice { name: "style".into(), scale: None, expert }];
    assert_eq!(r.resolve(&m.limits(), || 0).unwrap_err().field, "lora[0].expert");
}

fn residual_vae() -> fastvideo_wan::AutoencoderKLWan {
    let dir = fixture_dir().join("tiny-wan22-ti2v/vae");
    let cfg = fastvideo_wan::VaeConfig::load(&dir.join("config.json")).unwrap();
    let w = fastvideo_wan::Weights::from_dir(&dir, "diffusion_pytorch_model", Device::Cpu, tch::Kind::Float).unwrap();
    fastvideo_wan::AutoencoderKLWan::new(cfg, &w).unwrap()
}

#[test]
fn the_wan22_vae_encodes_and_decodes_as_diffusers() {
    // Residual blocks, 2x2 patches folded into 12 channels, 16x in space: 9 frames at 32x48.
    let vae = residual_vae();
    assert_eq!((vae.cfg.spatial_factor(), vae.cfg.temporal_factor()), (16, 4));
    let params = tch::no_grad(|| vae.encode_params(fx("vae.video"))).unwrap();
    let e = rel_err(&params, fx("vae.params"));
    eprintln!("wan 2.2 vae encode: relative error {e:.3e}");
    assert!(e < 1e-5, "encode relative error {e}"); // tolerance 1e-5 (float32), as the 2.1 VAE
    let video = tch::no_grad(|| vae.decode(fx("vae.z"))).unwrap();
    let e = rel_err(&video, fx("vae.decoded"));
    eprintln!("wan 2.2 vae decode: relative error {e:.3e}");
    assert!(e < 1e-5, "decode relative error {e}");
    // Streamed decoding (a latent frame at a time with the carried cache) gives the same frames.
    let mut stream = fastvideo_wan::vae::DecodeStream::default();
    let z = fx("vae.z");
    let parts: Vec<Tensor> =
        (0..3).map(|i| tch::no_grad(|| vae.decode_next(&mut stream, &z.narrow(2, i, 1))).unwrap()).collect();
    assert_eq!(Tensor::cat(&parts, 2), video);
}

/// The TI2V fixtures' run: 64x32, 9 frames, 4 steps, guidance 5.
fn ti2v_request(task: TaskType) -> OmniRequest {
    let mut r = request(task, 5.0, None);
    r.diffusion.width = Some(32);
    r.diffusion.height = Some(64);
    r.diffusion.num_inference_steps = Some(4);
    r
}

#[test]
fn ti2v_text_to_video_matches_diffusers_end_to_end() {
    let m = load("tiny-wan22-ti2v");
    assert!(m.expand_timesteps);
    let limits = m.limits();
    assert_eq!(
        limits.picture.unwrap().spatial_multiple,
        32,
        "16x VAE (patches included) times the transformer's 2x2 patch"
    );
    assert!(limits.tasks.contains(&TaskType::T2v) && limits.tasks.contains(&TaskType::I2v));
    let spec = Arc::new(pipeline::text_to_video(&m, pipeline::default_guidance()).unwrap());
    let req = ti2v_request(TaskType::T2v).resolve(&limits, || 0).unwrap();
    let (out, _) = crate::common::run_pipeline(spec, req, init("ti2v.latents_in"));
    crate::common::assert_matches_reference("ti2v t2v", &out, fx("ti2v.t2v.latents_out"), fx("ti2v.t2v.video"));
}

#[test]
fn ti2v_text_and_image_to_video_matches_diffusers_end_to_end() {
    // The picture is the clean first latent frame: its tokens run at timestep 0, and it is the
    // first frame of the result.
    let m = load("tiny-wan22-ti2v");
    let spec = Arc::new(pipeline::text_to_video(&m, pipeline::default_guidance()).unwrap());
    let mut req = ti2v_request(TaskType::T2v).resolve(&m.limits(), || 0).unwrap();
    with_first_frame(&mut req, "ti2v.first");
    let (out, _) = crate::common::run_pipeline(spec, req, init("ti2v.latents_in"));
    crate::common::assert_matches_reference("ti2v i2v", &out, fx("ti2v.i2v.latents_out"), fx("ti2v.i2v.video"));
}

/// The tiny two-expert model's run with the LoRA fixture `diffusers` at 0.8, bound to `expert`
/// (`None`: both), and the folder's boundary moved to `boundary`.
fn with_lora(m: &WanModel, expert: Option<u32>, boundary: f32) -> Tensor {
    let file = fastvideo_lora::LoraFile::read(&fixture_dir().join("lora/diffusers.safetensors"), &WanKeys).unwrap();
    let prepared = Arc::new(m.transformer.prepare_adapter(&file, "diffusers", "hash").unwrap());
    let set = Arc::new(fastvideo_pipeline::AdapterSet::bound(vec![(prepared, 0.8, expert)]));
    let mut r = request(TaskType::T2v, 4.0, Some(3.0));
    r.diffusion.set_knob("boundary_ratio", Some(boundary));
    let req = r.resolve(&m.limits(), || 0).unwrap();
    let spec = Arc::new(pipeline::text_to_video(m, pipeline::default_guidance()).unwrap());
    let mut values = init("t2v.latents_in");
    values.insert(fastvideo_pipeline::ADAPTERS, Value::Adapters(set));
    latents_of(&crate::common::run_pipeline(spec, req, values).0)
}

#[test]
fn adapters_bind_to_one_expert_or_both() {
    let m = load("tiny-wan22-t2v");
    let none = {
        let mut r = request(TaskType::T2v, 4.0, Some(3.0));
        r.diffusion.set_knob("boundary_ratio", Some(0.0));
        latents_of(&run_t2v(&m, r).0)
    };
    // Boundary 0: the high-noise expert runs every step, so an adapter bound to the low-noise
    // expert changes nothing, and one bound to the high-noise expert acts as one bound to both.
    assert!(with_lora(&m, Some(1), 0.0).equal(&none), "a low-noise adapter is idle on high-noise steps");
    let high = with_lora(&m, Some(0), 0.0);
    assert!(high.equal(&with_lora(&m, None, 0.0)));
    assert!(rel_err(&high, &none) > 1e-3, "the adapter changes the high-noise steps");
    // At the folder's boundary both experts run: binding to one differs from binding to both.
    let both = with_lora(&m, None, 0.875);
    assert!(rel_err(&both, &with_lora(&m, Some(0), 0.875)) > 1e-4);
    assert!(rel_err(&both, &with_lora(&m, Some(1), 0.875)) > 1e-4);
}

#[test]
fn a_set_bound_per_expert_merges_into_each_expert_its_part() {
    use fastvideo_pipeline::AdapterTarget;
    let m = load("tiny-wan22-t2v");
    let unmerged = with_lora(&m, Some(1), 0.875);
    let file = fastvideo_lora::LoraFile::read(&fixture_dir().join("lora/diffusers.safetensors"), &WanKeys).unwrap();
    let prepared = Arc::new(m.transformer.prepare_adapter(&file, "diffusers", "hash").unwrap());
    let set = fastvideo_pipeline::AdapterSet::bound(vec![(prepared, 0.8, Some(1))]);
    let target = fastvideo_wan::adapters::WanAdapters::of(&m);
    target.merge(&set).unwrap();
    assert_eq!(target.merged().as_deref(), Some(set.key()));
    assert_eq!(m.transformer.merged_adapters(), None, "nothing bound to the high-noise expert");
    assert!(m.low_noise.as_ref().unwrap().transformer.merged_adapters().is_some());
    let merged = with_lora(&m, Some(1), 0.875);
    let e = rel_err(&merged, &unmerged);
    assert!(e < 1e-5, "merged vs unmerged: relative error {e}"); // float32: summation order only
    target.unmerge();
    assert!(with_lora(&m, Some(1), 0.875).equal(&unmerged), "unmerging restores the weights exactly");
}

#[test]
fn offloaded_experts_compute_what_resident_ones_do() {
    // On the CPU the swap is a copy to host buffers and back: the bookkeeping and the weights'
    // round trip, not the memory saving (the H200 measures that, docs/benchmarks.md).
    let resident = load("tiny-wan22-t2v");
    let (want, _) = run_t2v(&resident, request(TaskType::T2v, 4.0, Some(3.0)));
    let opts = fastvideo_wan::LoadOptions { offload_experts: true, ..fastvideo_wan::LoadOptions::new(Device::Cpu) };
    let m = WanModel::load_with(&fixture_dir().join("tiny-wan22-t2v"), opts).unwrap();
    let swap = m.offload.clone().expect("two experts, offloaded");
    assert_eq!(swap.resident(), 0);
    let (got, _) = run_t2v(&m, request(TaskType::T2v, 4.0, Some(3.0)));
    assert!(latents_of(&got).equal(&latents_of(&want)));
    assert_eq!((swap.resident(), swap.swaps().0), (1, 1), "one swap, at the switch");
    let (again, _) = run_t2v(&m, request(TaskType::T2v, 4.0, Some(3.0)));
    assert!(latents_of(&again).equal(&latents_of(&want)), "the weights survive the round trip");
    assert_eq!(swap.swaps().0, 3, "back to the high-noise expert, and to the low-noise one again");
}
