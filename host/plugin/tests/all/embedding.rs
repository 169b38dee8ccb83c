//! Another embedder's view: a deploy turned into a running pipeline with nothing but
//! `host/plugin`'s [`Binding`] (`Deployment::bind`: loop policies, request check, failure
//! classifier) — the
//! same calls the CLI and the server make, so none of them holds deploy wiring of its own.

use crate::common;

use std::sync::Arc;

use crate::common::deploy_with_params;
use fastvideo_pipeline::{PipelineRun, Values};
use fastvideo_plugin_host::{Binding, Deployment};
use fastvideo_request::OmniOutput;
use fastvideo_wan::pipeline;
use tch::Device;

fn run(policies: fastvideo_pipeline::LoopPolicies, params: Option<serde_json::Value>) -> anyhow::Result<OmniOutput> {
    let spec = Arc::new(pipeline::text_to_video_with(common::tiny_wan(), policies)?);
    let r = common::tiny_request("a green star moving down on a black background", 3, 4);
    let req = common::resolve_tiny(r, params.map(|p| ("g", p)));
    let mut run = PipelineRun::new(spec, req, Device::Cpu, Values::default(), Default::default());
    run.run_to_end(&mut |_| {})?;
    run.finish(&mut |_| {})
}

#[test]
fn a_deploy_binds_into_a_pipeline_through_the_plugin_host_alone() {
    let grants = &["tensor", "tensor-ops", "log"];
    let d: Arc<Deployment> =
        deploy_with_params("fastvideo_guider_cfg_zero_star", "g", grants, "", "{ zero_init_steps = 1 }")
            .unwrap()
            .into();
    let bound = d.bind("tiny");
    let with = run(bound.policies.clone(), None).unwrap();
    let without = run(Binding::none().policies, None).unwrap();
    assert!(with.metrics.plugin_seconds > 0.0, "the guider plugin ran");
    assert_ne!(with.video().unwrap().rgb, without.video().unwrap().rgb, "and changed the result");
    assert_eq!(bound.describe(), [format!("guider: plugin `g` (blake3 {})", &d.plugins[0].plugin.audit.blake3[..16])]);

    // The request check names the field, with and without a deploy.
    let mut bad = common::tiny_request("x", 2, 1);
    bad.plugin_params.insert("nope".into(), serde_json::json!({}));
    let bad = common::resolve_tiny(bad, None);
    assert_eq!(bound.request_check()(&bad).unwrap_err().field, "plugin_params.nope");
    let e = Binding::none().check(&bad).unwrap_err();
    assert!(e.field == "plugin_params" && e.rule.contains("without --deploy"), "{e:?}");

    // A failing plugin is classified by the error's type.
    let m = Arc::new(deploy_with_params("fastvideo_testing_misbehave", "g", grants, "", "{}").unwrap());
    let err = run(m.bind("tiny").policies, Some(serde_json::json!({"mode": "trap"}))).unwrap_err();
    assert_eq!(Binding::classify_failure(&err), "plugin_failed");
    assert_eq!(Binding::classify_failure(&anyhow::anyhow!("a model error")), "pipeline_failed");
}
