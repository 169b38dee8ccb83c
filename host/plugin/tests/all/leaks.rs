//! Nothing a request's plugins hold outlives it: requests through a deploy with a guider, a
//! block cache and an observer — some exact (plugins bypassed), some failing in the guider —
//! leave no plugin instance (store, memory, tensor handles) and no per-request budget entry
//! behind. 40 run the whole tiny pipeline; 1,000 drive the bound policies' hooks directly (the
//! pipeline's model work would take minutes and allocates nothing of the plugin host's).

use crate::common;

use std::sync::Arc;

use fastvideo_pipeline::{Observed, PipelineRun, PluginMeter, StepCtx, Values};
use fastvideo_plugin_host::{inspect, DeployConfig, Deployment};
use fastvideo_wan::pipeline;
use tch::{Device, Kind, Tensor};

fn deploy() -> Deployment {
    let mut toml = String::new();
    for (stem, name, grants) in [
        ("fastvideo_testing_misbehave", "g", r#"["tensor", "tensor-ops", "log"]"#),
        ("fastvideo_cache_dbcache", "cache", r#"["tensor", "tensor-ops", "events"]"#),
        ("fastvideo_observer_profiler", "prof", r#"["tensor", "clock", "events"]"#),
    ] {
        let path = &common::plugins()[stem];
        let hash = inspect(&common::wasm(stem)).unwrap().blake3;
        toml += &format!(
            "[[plugins]]\nname = \"{name}\"\nsource = \"{}\"\nblake3 = \"{hash}\"\ngrants = {grants}\n",
            path.display()
        );
    }
    let cfg: DeployConfig = toml::from_str(&toml).unwrap();
    Deployment::from_config(cfg, std::path::Path::new("/")).unwrap()
}

fn request(i: u64) -> fastvideo_request::ResolvedRequest {
    let mut r = common::tiny_request("a red circle moving left on a white background", 1, i);
    r.request_id = format!("leak-{i}");
    r.exact = i % 10 == 3;
    let mode = if i % 10 == 7 { "trap" } else { "ok" };
    common::resolve_tiny(r, (i % 10 != 3).then(|| ("g", serde_json::json!({ "mode": mode }))))
}

#[test]
fn requests_leave_no_plugin_state_behind() {
    let d = deploy();
    let policies = d.policies("tiny");
    let spec = Arc::new(pipeline::text_to_video_with(common::tiny_wan(), policies.clone()).unwrap());
    assert_eq!(d.runtime.live_instances(), 0);
    let mut failed = 0;
    for i in 0..40u64 {
        let mut run = PipelineRun::new(spec.clone(), request(i), Device::Cpu, Values::default(), Default::default());
        let result = match run.run_to_end(&mut |_| {}) {
            Ok(()) => {
                assert!(d.runtime.live_instances() > 0, "a running request holds its instances");
                run.finish(&mut |_| {})
            }
            Err(e) => Err(e),
        };
        failed += result.is_err() as u32;
    }
    assert_eq!(failed, 4, "every 10th request traps in the guider");
    assert_eq!(d.runtime.live_instances(), 0);

    // The same hooks the loop calls, 1,000 requests' worth.
    let x = Tensor::randn([1, 16, 2, 4, 4], (Kind::Float, Device::Cpu));
    let (blocks, observer) = (policies.blocks.clone().unwrap(), policies.observers[0].clone());
    let mut failed = 0;
    for i in 0..1000u64 {
        let req = request(i);
        let ctx = StepCtx {
            request: &req,
            step_index: 0,
            num_steps: 1,
            timestep: 999.0,
            sigma: 1.0,
            sigma_next: 0.0,
            expert: 0,
            guidance_scale: req.guidance_scale,
        };
        let meter = PluginMeter::default();
        let mut obs = observer.init(&req, &meter).unwrap();
        obs.on_event(Observed::RequestStart, None, &mut |_| {}).unwrap();
        let mut plan = policies.guidance.init(&req, &meter).unwrap();
        let mut cache = blocks.init(&req, &meter).unwrap();
        cache.begin(&ctx, "cond", 2).unwrap();
        cache.after_block(&ctx, "cond", 0, &x, &x).unwrap();
        cache.end(&ctx, "cond", &x).unwrap();
        let guided = policies.guidance.combine(&ctx, &[x.shallow_clone(), x.shallow_clone()], &mut plan.state);
        failed += guided.is_err() as u32;
        obs.on_event(Observed::RequestEnd("completed"), None, &mut |_| {}).unwrap();
        assert!(d.runtime.live_instances() >= 1, "the observer at least (exact requests bypass the rest)");
        assert!(meter.used() > std::time::Duration::ZERO, "the request's calls are charged to its own meter");
    }
    assert_eq!(failed, 100);
    assert_eq!(d.runtime.live_instances(), 0, "no instance outlives its request");
}
