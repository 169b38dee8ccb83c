//! The DBCache/FBCache block-interceptor plugin through the real host on the Wan pipeline (tiny
//! reference model, 2 blocks, CFG on): it changes nothing when it never skips, skips the middle
//! blocks once the first block's residual is stable, honours its caps, and a bad configuration
//! fails the request with an error naming the plugin and hook.

use crate::common;

use std::sync::Arc;

use crate::common::deploy;
use fastvideo_pipeline::{LoopPolicies, PipelineRun, Values};
use fastvideo_plugin_host::{PluginBlockPolicy, PluginError, PluginKind};
use fastvideo_request::{OmniEvent, ResolvedRequest};
use fastvideo_wan::{pipeline, WanModel};
use tch::Device;

fn model() -> &'static WanModel {
    common::tiny_wan()
}

const STEPS: u32 = 4;

fn request(params: serde_json::Value) -> ResolvedRequest {
    let r = common::tiny_request("a green cross moving down on a black background", STEPS, 3);
    common::resolve_tiny(r, Some(("cache", params)))
}

/// Runs the pipeline with the cache (or without, `params = None`); returns RGB bytes and the
/// number of `dbcache.hit` events.
fn run(params: Option<serde_json::Value>) -> anyhow::Result<(Vec<u8>, usize)> {
    let d = deploy("fastvideo_cache_dbcache", "cache", &["tensor", "tensor-ops", "events"], "").unwrap();
    let policy =
        Arc::new(PluginBlockPolicy::new(&d, d.of_kind(PluginKind::BlockInterceptor).next().unwrap().clone(), "tiny"));
    let blocks = params.is_some().then(|| policy.clone() as Arc<dyn fastvideo_pipeline::BlockPolicy>);
    let policies = LoopPolicies { blocks, ..LoopPolicies::new(pipeline::default_guidance()) };
    let spec = Arc::new(pipeline::text_to_video_with(model(), policies)?);
    let req = request(params.unwrap_or_else(|| serde_json::json!({})));
    let mut run = PipelineRun::new(spec, req, Device::Cpu, Values::default(), Default::default());
    let mut events = Vec::new();
    run.run_to_end(&mut |e| events.push(e))?;
    let video = run.finish(&mut |e| events.push(e))?.video().unwrap().rgb.clone();
    // The cache's events reach the request's own stream.
    let hits = events
        .iter()
        .filter(|e| matches!(e, OmniEvent::Plugin { name, request_id, .. } if name == "dbcache.hit" && request_id == "plugin-test"))
        .count();
    Ok((video, hits))
}

#[test]
fn never_skipping_changes_nothing() {
    let (base, _) = run(None).unwrap();
    let (cached, hits) = run(Some(serde_json::json!({"residual_diff_threshold": 0.0}))).unwrap();
    assert_eq!(hits, 0);
    assert_eq!(cached, base, "threshold 0 computes every block: bit-identical video");
}

#[test]
fn skips_middle_blocks_after_warmup_per_branch_with_caps() {
    let (base, _) = run(None).unwrap();
    let always = serde_json::json!({"residual_diff_threshold": 1e9, "warmup_steps": 1});
    let (cached, hits) = run(Some(always)).unwrap();
    assert_eq!(hits as u32, (STEPS - 1) * 2, "every step after warmup, for cond and uncond");
    assert_ne!(cached, base, "skipping block 1 changes the result");
    let capped = serde_json::json!({"residual_diff_threshold": 1e9, "warmup_steps": 1, "max_cached_steps": 1});
    assert_eq!(run(Some(capped)).unwrap().1, 2, "one skip per branch");
    let late = serde_json::json!({"residual_diff_threshold": 1e9, "warmup_steps": 3});
    assert_eq!(run(Some(late)).unwrap().1 as u32, (STEPS - 3) * 2);
}

#[test]
fn a_cache_that_cannot_fit_the_model_fails_its_request_by_name() {
    // Two blocks: Fn = 2 leaves no middle blocks.
    let err = run(Some(serde_json::json!({"fn_blocks": 2}))).unwrap_err();
    let e = err.chain().find_map(|c| c.downcast_ref::<PluginError>()).unwrap_or_else(|| panic!("{err:#}"));
    let msg = e.to_string();
    assert!(msg.contains("`cache`") && msg.contains("begin-forward") && msg.contains("no middle blocks"), "{msg}");
}

/// A few-step schedule (4 steps or fewer: distilled models) leaves a cross-step cache nothing to
/// reuse: admission refuses it naming the field and the plugin, for the block cache and the
/// step cache alike; 5 steps pass, and so does an exact request (which runs without the cache).
#[test]
fn caches_are_refused_on_few_step_schedules() {
    for (stem, name) in [("fastvideo_cache_dbcache", "cache"), ("fastvideo_cache_taylorseer", "seer")] {
        let d = Arc::new(deploy(stem, name, &["tensor", "tensor-ops", "events"], "").unwrap());
        let binding = d.bind("tiny");
        let req = |steps: u32, exact: bool| {
            let mut r = common::tiny_request("a red circle", steps, 1);
            r.exact = exact;
            common::resolve_tiny(r, None)
        };
        let err = binding.check(&req(4, false)).unwrap_err();
        assert_eq!(err.field, "diffusion.num_inference_steps", "{stem}");
        assert!(err.rule.contains(&format!("`{name}`")) && err.rule.contains("4 steps"), "{}", err.rule);
        binding.check(&req(5, false)).unwrap();
        binding.check(&req(4, true)).unwrap();
    }
}
