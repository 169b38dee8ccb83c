//! Step-interceptor and observer plugins through the real host on the Wan pipeline (tiny
//! reference model, CFG on): TaylorSeer supplies extrapolated outputs so forwards are skipped
//! (and changes nothing when told to compute every step), NaNWatch finds the first non-finite
//! step, Profiler times steps and nodes with the granted clock, and observers are called only
//! for the events their manifest lists.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::common::deploy;
use fastvideo_pipeline::{
    LoopPolicies, Observer, PipelineRun, PluginMeter, StepCtx, StepPolicy, StepPolicyState, Values,
};
use fastvideo_plugin_host::{PluginError, PluginKind, PluginObserver, PluginStepPolicy};
use fastvideo_request::{OmniEvent, OmniOutput, ResolvedRequest};
use fastvideo_wan::{pipeline, WanModel};
use tch::{Device, Tensor};

fn model() -> &'static WanModel {
    common::tiny_wan()
}

const STEPS: u32 = 8;

fn request(name: &str, params: serde_json::Value) -> ResolvedRequest {
    let r = common::tiny_request("a red square moving left on a white background", STEPS, 5);
    common::resolve_tiny(r, Some((name, params)))
}

/// Runs the pipeline; returns the output and every streamed event.
fn run(policies: LoopPolicies, req: ResolvedRequest) -> anyhow::Result<(OmniOutput, Vec<OmniEvent>)> {
    let spec = Arc::new(pipeline::text_to_video_with(model(), policies)?);
    let mut run = PipelineRun::new(spec, req, Device::Cpu, Values::default(), Default::default());
    let mut events = Vec::new();
    run.run_to_end(&mut |e| events.push(e))?;
    let out = run.finish(&mut |e| events.push(e))?;
    Ok((out, events))
}

fn plugin_events<'a>(events: &'a [OmniEvent], name: &str) -> Vec<&'a serde_json::Value> {
    events
        .iter()
        .filter_map(|e| match e {
            OmniEvent::Plugin { name: n, payload, .. } if n == name => Some(payload),
            _ => None,
        })
        .collect()
}

fn builtin() -> LoopPolicies {
    LoopPolicies::new(pipeline::default_guidance())
}

fn taylorseer(params: serde_json::Value) -> anyhow::Result<(OmniOutput, Vec<OmniEvent>)> {
    let d = deploy("fastvideo_cache_taylorseer", "seer", &["tensor", "tensor-ops", "events"], "").unwrap();
    let p = d.of_kind(PluginKind::StepInterceptor).next().unwrap().clone();
    let steps = Some(Arc::new(PluginStepPolicy::new(&d, p, "tiny")) as Arc<dyn StepPolicy>);
    run(LoopPolicies { steps, ..builtin() }, request("seer", params))
}

#[test]
fn taylorseer_computing_every_step_changes_nothing() {
    let (base, _) = run(builtin(), request("none", serde_json::json!({}))).unwrap();
    let (seer, events) = taylorseer(serde_json::json!({"interval": 1})).unwrap();
    assert!(plugin_events(&events, "taylorseer.hit").is_empty());
    assert_eq!(seer.metrics.forwards, base.metrics.forwards);
    assert_eq!(seer.video().unwrap().rgb, base.video().unwrap().rgb, "bit-identical video");
}

#[test]
fn taylorseer_skips_the_forwards_of_extrapolated_steps() {
    let (base, _) = run(builtin(), request("none", serde_json::json!({}))).unwrap();
    for order in [1, 2] {
        // 8 steps, warmup 2, interval 2, last step computed: steps 3 and 5 are extrapolated.
        let params = serde_json::json!({"order": order, "interval": 2, "warmup_steps": 2, "final_steps": 2});
        let (seer, events) = taylorseer(params).unwrap();
        let hits: Vec<u64> =
            plugin_events(&events, "taylorseer.hit").iter().map(|p| p["step"].as_u64().unwrap()).collect();
        assert_eq!(hits, vec![3, 5], "order {order}");
        assert_eq!(seer.metrics.forwards, base.metrics.forwards - 2 * 2, "two CFG forwards per skipped step");
        let (a, b) = (&seer.video().unwrap().rgb, &base.video().unwrap().rgb);
        assert_ne!(a, b, "extrapolated steps change the result");
        // An extrapolation, not garbage: the mean absolute pixel difference stays small.
        let diff = a.iter().zip(b).map(|(x, y)| (*x as f64 - *y as f64).abs()).sum::<f64>() / a.len() as f64;
        assert!(diff < 20.0, "order {order}: mean |diff| {diff} of 255");
    }
}

#[test]
fn taylorseer_with_bad_parameters_fails_its_request_by_name() {
    let err = taylorseer(serde_json::json!({"order": 3})).unwrap_err();
    let msg = format!("{err:#}");
    assert!(msg.contains("order"), "{msg}");
}

/// A native step policy that supplies a NaN output at one step (what a diverging model does).
struct PoisonAt(u32);
struct PoisonState(u32);
impl StepPolicy for PoisonAt {
    fn init(&self, _req: &ResolvedRequest, _: &PluginMeter) -> anyhow::Result<Box<dyn StepPolicyState>> {
        Ok(Box::new(PoisonState(self.0)))
    }
}
impl StepPolicyState for PoisonState {
    fn before_step(&mut self, step: &StepCtx, latents: &Tensor) -> anyhow::Result<Option<Tensor>> {
        Ok((step.step_index == self.0).then(|| latents.full_like(f64::NAN)))
    }
    fn after_step(&mut self, _step: &StepCtx, _output: &Tensor) -> anyhow::Result<()> {
        Ok(())
    }
}

fn observed(
    stem: &str,
    grants: &[&str],
    steps: Option<Arc<dyn StepPolicy>>,
    params: serde_json::Value,
) -> (anyhow::Result<(OmniOutput, Vec<OmniEvent>)>, Arc<AtomicUsize>) {
    let d = deploy(stem, "watch", grants, "").unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    d.runtime.observe_calls(Box::new(move |_| {
        c.fetch_add(1, Ordering::Relaxed);
    }));
    let p = d.of_kind(PluginKind::Observer).next().unwrap().clone();
    let observers = vec![Arc::new(PluginObserver::new(&d, p, "tiny")) as Arc<dyn Observer>];
    (run(LoopPolicies { steps, observers, ..builtin() }, request("watch", params)), calls)
}

const NANWATCH: &str = "fastvideo_observer_nanwatch";

#[test]
fn nanwatch_reports_nothing_on_a_healthy_run_and_is_called_only_for_its_events() {
    let (r, calls) = observed(NANWATCH, &["tensor", "tensor-ops", "events"], None, serde_json::json!({}));
    let (out, events) = r.unwrap();
    assert!(plugin_events(&events, "nanwatch.nonfinite").is_empty());
    let summary = plugin_events(&events, "nanwatch.summary");
    assert_eq!(summary.len(), 1);
    assert_eq!(summary[0]["steps_checked"], STEPS);
    assert!(summary[0]["first_nonfinite_step"].is_null());
    assert_eq!(summary[0]["outcome"], "completed");
    // init + one call per step end + request end; node and step-start events never reach it.
    assert_eq!(calls.load(Ordering::Relaxed), 1 + STEPS as usize + 1);
    assert!(out.metrics.plugin_seconds > 0.0, "plugin time is the request's: {:?}", out.metrics);
    let (plain, _) = run(builtin(), request("none", serde_json::json!({}))).unwrap();
    assert_eq!(plain.metrics.plugin_seconds, 0.0);
}

#[test]
fn nanwatch_names_the_first_non_finite_step_and_can_stop_the_request() {
    let poison = || Some(Arc::new(PoisonAt(3)) as Arc<dyn StepPolicy>);
    let grants = ["tensor", "tensor-ops", "events"];
    let (r, _) = observed(NANWATCH, &grants, poison(), serde_json::json!({}));
    let (_, events) = r.unwrap();
    let hits = plugin_events(&events, "nanwatch.nonfinite");
    assert_eq!(hits.len(), 1, "only the first is reported");
    assert_eq!(hits[0]["step"], 3);
    assert_eq!(hits[0]["tap"], "model-output");
    assert_eq!(hits[0]["value"], "nan");

    let (r, _) = observed(NANWATCH, &grants, poison(), serde_json::json!({"fail": true}));
    let err = r.unwrap_err();
    let e = err.chain().find_map(|c| c.downcast_ref::<PluginError>()).unwrap_or_else(|| panic!("{err:#}"));
    let msg = e.to_string();
    assert!(msg.contains("`watch`") && msg.contains("on-event") && msg.contains("step 3"), "{msg}");
}

#[test]
fn profiler_times_every_step_and_node_with_the_clock_it_was_granted() {
    let grants = ["tensor", "events", "clock"];
    let (r, _) = observed("fastvideo_observer_profiler", &grants, None, serde_json::json!({}));
    let (_, events) = r.unwrap();
    let steps = plugin_events(&events, "profiler.step");
    assert_eq!(steps.len(), STEPS as usize);
    for (i, s) in steps.iter().enumerate() {
        assert_eq!(s["step"], i as u64);
        assert!(s["ms"].as_f64().unwrap() > 0.0, "a step of the tiny model takes measurable time: {s}");
    }
    let nodes: Vec<&str> =
        plugin_events(&events, "profiler.node").iter().map(|n| n["node"].as_str().unwrap()).collect();
    // Every node of the text-to-video graph (video_encode passes a request without a video through).
    assert_eq!(nodes, ["text_encode", "video_encode", "denoise", "vae_decode", "assemble"]);
    let summary = plugin_events(&events, "profiler.summary");
    let s = summary[0];
    assert_eq!(s["steps"], STEPS);
    let (total, mean) = (s["total_ms"].as_f64().unwrap(), s["step_ms_mean"].as_f64().unwrap());
    assert!(total >= mean * STEPS as f64, "the request contains its steps: total {total} ms, mean step {mean} ms");
    assert!(s["step_ms_max"].as_f64().unwrap() >= mean);

    // Without the clock grant the deploy refuses to start, naming what is missing.
    let err = deploy("fastvideo_observer_profiler", "watch", &["tensor", "events"], "").err().unwrap().to_string();
    assert!(err.contains("`watch`") && err.contains("clock"), "{err}");
}
