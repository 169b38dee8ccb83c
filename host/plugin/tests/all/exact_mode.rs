//! Exact mode means exact: a request with `exact: true` runs every first-party plugin that alters
//! the sampled distribution (guiders other than plain CFG, block and step caches) as if it were
//! not deployed — bit-identical to the built-in loop — while the same deploy does change a
//! non-exact request. Parameters for a bypassed plugin are refused with the reason.

use crate::common;

use std::sync::Arc;

use crate::common::deploy_with_params;
use fastvideo_pipeline::{BlockPolicy, Guidance, LoopPolicies, PipelineRun, StepPolicy, Values};
use fastvideo_plugin_host::{Deployment, PluginBlockPolicy, PluginGuider, PluginKind, PluginStepPolicy};
use fastvideo_request::{OmniOutput, ResolvedRequest};
use fastvideo_wan::pipeline;
use tch::Device;

const STEPS: u32 = 4;

fn request(exact: bool) -> ResolvedRequest {
    let mut r = common::tiny_request("a yellow circle moving right on a blue background", STEPS, 11);
    r.exact = exact;
    common::resolve_tiny(r, None)
}

fn run(policies: LoopPolicies, req: ResolvedRequest) -> OmniOutput {
    let spec = Arc::new(pipeline::text_to_video_with(common::tiny_wan(), policies).unwrap());
    let mut run = PipelineRun::new(spec, req, Device::Cpu, Values::default(), Default::default());
    run.run_to_end(&mut |_| {}).unwrap();
    run.finish(&mut |_| {}).unwrap()
}

fn builtin() -> LoopPolicies {
    LoopPolicies::new(pipeline::default_guidance())
}

/// The deploy's one plugin bound where its kind goes.
fn bound(d: &Deployment) -> LoopPolicies {
    let p = d.plugins[0].clone();
    let mut l = builtin();
    match p.plugin.audit.manifest.kind {
        PluginKind::Guider => l.guidance = Arc::new(PluginGuider::new(d, p, "tiny")) as Arc<dyn Guidance>,
        PluginKind::BlockInterceptor => {
            l.blocks = Some(Arc::new(PluginBlockPolicy::new(d, p, "tiny")) as Arc<dyn BlockPolicy>)
        }
        PluginKind::StepInterceptor => {
            l.steps = Some(Arc::new(PluginStepPolicy::new(d, p, "tiny")) as Arc<dyn StepPolicy>)
        }
        k => panic!("not a loop plugin: {k:?}"),
    }
    l
}

#[test]
fn every_distribution_altering_plugin_is_bypassed_for_exact_requests() {
    let base = run(builtin(), request(true));
    let grants = &["tensor", "tensor-ops", "events"];
    for (stem, name, params) in [
        ("fastvideo_guider_apg", "apg", "{ eta = 0.0, norm_threshold = 0.5 }"),
        ("fastvideo_guider_cfg_zero_star", "cfgz", "{ zero_init_steps = 1 }"),
        ("fastvideo_cache_dbcache", "cache", "{ residual_diff_threshold = 1e9, warmup_steps = 1 }"),
        ("fastvideo_cache_taylorseer", "seer", "{ interval = 2, warmup_steps = 1, final_steps = 1 }"),
    ] {
        let d = deploy_with_params(stem, name, grants, "", params).unwrap();
        assert!(d.plugins[0].plugin.audit.manifest.distribution_altering, "{name}");
        let altered = run(bound(&d), request(false));
        assert_ne!(altered.video().unwrap().rgb, base.video().unwrap().rgb, "{name} is active for a plain request");
        let exact = run(bound(&d), request(true));
        assert_eq!(exact.video().unwrap().rgb, base.video().unwrap().rgb, "{name}: exact is the built-in loop");
        assert_eq!(exact.metrics.forwards, base.metrics.forwards, "{name}: every forward computed");
        assert_eq!(exact.metrics.plugin_seconds, 0.0, "{name}: never called");
        // Asking an exact request to tune a plugin it will not run is an error, not a no-op.
        let mut r = common::tiny_request("x", STEPS, 1);
        r.exact = true;
        let r = common::resolve_tiny(r, Some((name, serde_json::json!({}))));
        let e = d.check_request(&r).unwrap_err().to_string();
        assert!(e.contains(&format!("plugin_params.{name}")) && e.contains("exact request runs without it"), "{e}");
    }
}

#[test]
fn plain_cfg_and_observers_still_run_in_exact_mode() {
    let d = deploy_with_params("fastvideo_guider_cfg", "cfg", &["tensor", "tensor-ops"], "", "{}").unwrap();
    assert!(!d.plugins[0].plugin.audit.manifest.distribution_altering);
    let out = run(bound(&d), request(true));
    assert!(out.metrics.plugin_seconds > 0.0, "the cfg plugin was called");
    let base = run(builtin(), request(true));
    let (a, b) = (&out.video().unwrap().rgb, &base.video().unwrap().rgb);
    assert!(a.iter().zip(b).all(|(x, y)| x.abs_diff(*y) <= 1), "plain CFG matches the built-in within 1/255");
}
