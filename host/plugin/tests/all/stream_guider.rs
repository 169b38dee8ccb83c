//! The `stream-guider` plugin kind (WIT 0.1.5) on the tiny LTX-2 folder: `plugins/guiders/ltx2-av`
//! does through the WIT contract what the pipeline's own rule does (per-stream CFG, STG,
//! modality guidance and rescale on x0 estimates), so video latents and sound match the
//! built-in rule; pinning a scale in the deploy changes that stream; the audit shows a 0.1.5
//! stream guider; a one-stream model refuses one.

use std::sync::{Arc, OnceLock};

use fastvideo_ltx2::Ltx2Model;
use fastvideo_pipeline::{PipelineRun, Values};
use fastvideo_plugin_host::{inspect, PluginKind};
use fastvideo_request::{Artifact, OmniRequest, ResolvedRequest};
use tch::{Device, Kind, Tensor};

use crate::common;

const STEM: &str = "fastvideo_guider_ltx2_av";
const GRANTS: [&str; 2] = ["tensor", "tensor-ops"];

fn model() -> &'static Ltx2Model {
    static M: OnceLock<Ltx2Model> = OnceLock::new();
    M.get_or_init(|| {
        let dir = common::repo().join("tests/fixtures/tiny-ltx2");
        Ltx2Model::load(&dir, Device::Cpu, (Kind::Float, Kind::Float, Kind::Float)).unwrap()
    })
}

/// 17 frames of 32x32, 3 steps, guidance 3, audio guidance 5 (the other scales the pipeline's).
fn request() -> ResolvedRequest {
    let mut r = OmniRequest::text_to_video("av", "a red ball bounces on a wooden floor and a bell rings");
    r.diffusion.height = Some(32);
    r.diffusion.width = Some(32);
    r.diffusion.num_frames = Some(17);
    r.diffusion.num_inference_steps = Some(3);
    r.diffusion.guidance_scale = Some(3.0);
    r.diffusion.set_knob("audio_guidance_scale", Some(5.0));
    r.sampling.seed = Some(3);
    r.outputs.return_latents = true;
    r.resolve(&model().limits(), || 0).unwrap()
}

/// `(video latents, waveform)` of `req` with the plugin deployed (`params`: its deploy
/// defaults, a TOML inline table) or with the pipeline's own rule.
fn run(plugin: Option<&str>, req: ResolvedRequest) -> anyhow::Result<(Tensor, Tensor)> {
    let guidance = match plugin {
        Some(params) => {
            let d = common::deploy_with_params(STEM, "ltx2-av", &GRANTS, "", params).unwrap();
            let p = d.policies("tiny-ltx2");
            assert!(p.stream_guidance.is_some(), "the deploy binds the stream guider");
            p.stream_guidance
        }
        None => None,
    };
    let spec = Arc::new(fastvideo_ltx2::pipeline::spec(model(), Vec::new(), guidance)?);
    let mut run = PipelineRun::new(spec, req, Device::Cpu, Values::default(), Default::default());
    run.run_to_end(&mut |_| {})?;
    let out = run.finish(&mut |_| {})?;
    let Some(Artifact::Latents(l)) = out.artifacts.get("latents") else { panic!("latents returned") };
    let Some(Artifact::Audio(a)) = out.artifacts.get("audio") else { panic!("sound returned") };
    Ok((Tensor::from_slice(&l.data).view(l.shape.as_slice()), Tensor::from_slice(&a.samples)))
}

fn rel(a: &Tensor, b: &Tensor) -> f64 {
    (a - b).abs().max().double_value(&[]) / b.abs().max().double_value(&[])
}

/// float32 on both sides; the plugin's host ops round in their own order (x0 as one linear
/// combination, the velocity as a scale by 1/σ): 1e-5 relative.
#[test]
fn the_plugin_guides_both_streams_as_the_pipelines_own_rule() {
    let (video, audio) = run(None, request()).unwrap();
    let (pv, pa) = run(Some("{}"), request()).unwrap();
    let (ev, ea) = (rel(&pv, &video), rel(&pa, &audio));
    eprintln!("ltx2-av against the built-in rule: video {ev:.2e}, audio {ea:.2e}");
    assert!(ev < 1e-5 && ea < 1e-5, "video {ev:.2e}, audio {ea:.2e}");
}

#[test]
fn a_scale_pinned_in_the_deploy_changes_that_stream() {
    let (video, audio) = run(None, request()).unwrap();
    let (pv, pa) = run(Some("{ audio_guidance_scale = 1.0, audio_modality_scale = 1.0 }"), request()).unwrap();
    assert!(rel(&pa, &audio) > 1e-3, "the audio's guidance changed");
    // The streams see each other, so the video moves too, but far less than the sound.
    assert!(rel(&pv, &video) < rel(&pa, &audio), "video {:.2e}", rel(&pv, &video));
}

#[test]
fn the_audit_shows_a_stream_guider_of_wit_0_1_5() {
    let a = inspect(&common::wasm(STEM)).unwrap();
    assert_eq!(a.manifest.kind, PluginKind::StreamGuider);
    assert_eq!(a.manifest.hooks, ["combine"]);
    assert_eq!(a.manifest.wit, "0.1.5");
    assert!(a.exports.iter().any(|e| e == "fastvideo:plugin/stream-guider@0.1.5"), "{:?}", a.exports);
    assert_eq!(a.capabilities, ["tensor", "tensor-ops"], "{:?}", a.imports);
}

#[test]
fn a_one_stream_model_refuses_a_stream_guider() {
    let d = common::deploy(STEM, "ltx2-av", &GRANTS, "").unwrap();
    let e = fastvideo_wan::pipeline::text_to_video_with(common::tiny_wan(), d.policies("tiny-wan")).err().unwrap();
    assert!(e.to_string().contains("Wan denoises one: bind a guider"), "{e}");
}
