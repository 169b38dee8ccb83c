//! The `expert-router` plugin kind on the tiny Wan 2.2 two-expert folder: `plugins/routers/snr`
//! routes by signal-to-noise ratio. At the SNR of the model's own boundary it routes every step as
//! the built-in rule does (bit-identical latents); another threshold moves the switch; an exact
//! request runs the built-in rule; a route to an expert the model lacks fails the request naming
//! the plugin; the audit shows a plugin that sees no tensors.

use std::sync::{Arc, Mutex};

use fastvideo_pipeline::{LoopPolicies, Observed, Observer, ObserverState, PipelineRun, PluginMeter, Values};
use fastvideo_plugin_host::{inspect, PluginKind};
use fastvideo_request::{Artifact, OmniEvent, OmniRequest, ResolvedRequest};
use fastvideo_wan::{pipeline, WanModel};
use tch::{Device, Tensor};

use crate::common;

const STEM: &str = "fastvideo_router_snr";

fn model() -> &'static WanModel {
    static M: std::sync::OnceLock<WanModel> = std::sync::OnceLock::new();
    M.get_or_init(|| WanModel::load(&common::repo().join("tests/fixtures/tiny-wan22-t2v"), Device::Cpu).unwrap())
}

/// Six steps (timesteps 999, 937, 857, 750, 600, 376); the folder's boundary is 0.875.
fn request(exact: bool, params: Option<serde_json::Value>) -> ResolvedRequest {
    let mut r = OmniRequest::text_to_video("router", "a red circle moving left on a white background");
    r.diffusion.height = Some(32);
    r.diffusion.width = Some(32);
    r.diffusion.num_frames = Some(9);
    r.diffusion.num_inference_steps = Some(6);
    r.diffusion.guidance_scale = Some(4.0);
    r.diffusion.set_knob("guidance_scale_2", Some(3.0));
    r.sampling.seed = Some(5);
    r.outputs.return_latents = true;
    r.exact = exact;
    if let Some(p) = params {
        r.plugin_params.insert("snr".into(), p);
    }
    r.resolve(&model().limits(), || 0).unwrap()
}

#[derive(Default, Clone)]
struct Routes(Arc<Mutex<Vec<(u32, f32)>>>);

impl Observer for Routes {
    fn init(&self, _: &ResolvedRequest, _: &PluginMeter) -> anyhow::Result<Box<dyn ObserverState>> {
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

/// Runs `req` with the router deployed (or the built-in rule): latents and the routes taken.
fn run(routed: bool, req: ResolvedRequest) -> anyhow::Result<(Tensor, Vec<(u32, f32)>)> {
    let routes = Routes::default();
    let mut policies = match routed {
        true => {
            let d = common::deploy(STEM, "snr", &["log"], "").unwrap();
            let p = d.policies("tiny-wan22");
            assert!(p.routing.is_some(), "the deploy binds the router");
            p
        }
        false => LoopPolicies::new(pipeline::default_guidance()),
    };
    policies.observers.push(Arc::new(routes.clone()));
    let spec = Arc::new(pipeline::text_to_video_with(model(), policies).unwrap());
    let mut run = PipelineRun::new(spec, req, Device::Cpu, Values::default(), Default::default());
    run.run_to_end(&mut |_| {})?;
    let out = run.finish(&mut |_| {})?;
    let Some(Artifact::Latents(l)) = out.artifacts.get("latents") else { panic!("latents returned") };
    let seen = routes.0.lock().unwrap().clone();
    Ok((Tensor::from_slice(&l.data).view(l.shape.as_slice()), seen))
}

#[test]
fn at_the_boundarys_snr_the_router_routes_as_the_builtin_rule() {
    let (builtin, want) = run(false, request(false, None)).unwrap();
    let (routed, got) = run(true, request(false, None)).unwrap();
    assert_eq!(want, [(0, 4.0), (0, 4.0), (1, 3.0), (1, 3.0), (1, 3.0), (1, 3.0)]);
    assert_eq!(got, want);
    assert!(routed.equal(&builtin), "the same routes give bit-identical latents");
}

#[test]
fn another_threshold_moves_the_switch_and_changes_the_video() {
    // SNR 0.05 falls between σ = 0.857 (SNR 0.028) and σ = 0.75 (SNR 0.11): three high-noise steps.
    let (builtin, _) = run(false, request(false, None)).unwrap();
    let params = serde_json::json!({"snr": 0.05, "guidance_scale_2": 2.0});
    let (routed, routes) = run(true, request(false, Some(params))).unwrap();
    assert_eq!(routes, [(0, 4.0), (0, 4.0), (0, 4.0), (1, 2.0), (1, 2.0), (1, 2.0)]);
    assert!(!routed.allclose(&builtin, 1e-6, 1e-6, false), "a different route, a different result");
}

#[test]
fn an_exact_request_runs_the_builtin_rule() {
    // (Parameters for a bypassed plugin are refused at admission, as exact_mode.rs checks.)
    let (builtin, want) = run(false, request(true, None)).unwrap();
    let (routed, got) = run(true, request(true, None)).unwrap();
    assert_eq!(got, want);
    assert!(routed.equal(&builtin));
}

#[test]
fn a_route_to_a_missing_expert_fails_the_request_naming_the_plugin() {
    let e = run(true, request(false, Some(serde_json::json!({"force": 5})))).unwrap_err();
    let msg = format!("{e:#}");
    assert!(msg.contains("snr") && msg.contains("expert 5"), "{msg}");
}

#[test]
fn the_audit_shows_a_router_that_sees_no_tensors() {
    let a = inspect(&common::wasm(STEM)).unwrap();
    assert_eq!(a.manifest.kind, PluginKind::ExpertRouter);
    assert_eq!(a.manifest.hooks, ["route"]);
    assert!(a.manifest.distribution_altering);
    assert!(a.exports.iter().any(|e| e.starts_with("fastvideo:plugin/expert-router@0.1.5")), "{:?}", a.exports);
    assert!(a.capabilities.iter().all(|c| c == "log"), "{:?}", a.capabilities);
}
