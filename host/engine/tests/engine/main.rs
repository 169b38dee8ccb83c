//! The engine end to end on a toy pipeline whose loop sleeps a fixed time per step, so ordering,
//! cancellation and failure isolation are observable without a model. The prompt steers the toy:
//! `fail` errors at step 2, `panic` panics at step 2.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use fastvideo_engine::{Engine, EngineConfig, EngineError, EngineModel, Metrics, Policy};
use fastvideo_pipeline::{LoopStage, LoopState, Node, NodeCtx, PipelineSpec, Stage, StepResult, Value, Values};
use fastvideo_request::{
    Defaults, ModelLimits, OmniEvent, OmniRequest, PictureLimits, SamplerKind, TaskType, VideoLimits,
};
use tch::{Device, Tensor};

/// Loop states alive of `counted` requests: a cancelled request must drop its state. (Only
/// the cancellation test's requests count, since tests run in parallel.)
static LIVE_STATES: AtomicUsize = AtomicUsize::new(0);
/// Steps started by requests whose prompt is `counted` (the cancellation test's).
static COUNTED_STEPS: AtomicUsize = AtomicUsize::new(0);

struct StateGuard(bool);
impl Drop for StateGuard {
    fn drop(&mut self) {
        if self.0 {
            LIVE_STATES.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

struct ToyLoop {
    step_time: Duration,
}

impl LoopStage for ToyLoop {
    fn init(&self, ctx: &NodeCtx, _values: &mut Values) -> Result<LoopState> {
        let counted = ctx.request.prompt == "counted";
        if counted {
            LIVE_STATES.fetch_add(1, Ordering::SeqCst);
        }
        Ok(LoopState { step: 0, total_steps: ctx.request.steps, inner: Box::new(StateGuard(counted)) })
    }
    fn step(&self, ctx: &NodeCtx, state: &mut LoopState) -> Result<StepResult> {
        if ctx.request.prompt == "counted" {
            COUNTED_STEPS.fetch_add(1, Ordering::SeqCst);
        }
        std::thread::sleep(self.step_time);
        if state.step == 2 && ctx.request.prompt == "fail" {
            anyhow::bail!("toy failure");
        }
        if state.step == 2 && ctx.request.prompt == "panic" {
            panic!("toy panic");
        }
        Ok(StepResult { done: false, forwards: 1, ..Default::default() })
    }
    fn finalize(&self, _ctx: &NodeCtx, state: LoopState, values: &mut Values) -> Result<()> {
        values.insert("latents", Value::Tensor(Tensor::from(state.step as f32)));
        Ok(())
    }
}

struct Encode;
impl Stage for Encode {
    fn run(&self, _ctx: &NodeCtx, values: &mut Values) -> Result<()> {
        values.insert("cond", Value::Tensor(Tensor::from(1f32)));
        Ok(())
    }
}

fn limits() -> ModelLimits {
    let example = ModelLimits::example();
    ModelLimits {
        family: "Toy".into(),
        tasks: vec![TaskType::T2v],
        image_roles: Vec::new(),
        video: Some(VideoLimits { frame_multiple: 4, max_frames: 81 }),
        picture: Some(PictureLimits { spatial_multiple: 16, max_side: 4096 }),
        audio: None,
        action: None,
        references: None,
        max_steps: 1000,
        defaults: Defaults {
            steps: 10,
            guidance_scale: 1.0,
            height: 32,
            width: 32,
            num_frames: 1,
            sampler: SamplerKind::Euler,
            ..example.defaults
        },
    }
}

/// Wan's count: latent frames (4x temporal stride) times 16-pixel patches.
fn wan_tokens() -> fastvideo_pipeline::WorkCount {
    Arc::new(|r| ((r.num_frames.max(1) - 1) / 4 + 1) as u64 * (r.height / 16) as u64 * (r.width / 16) as u64)
}

fn engine(cfg: EngineConfig, step_ms: u64) -> Engine {
    let nodes = vec![
        Node::stage("encode", Arc::new(Encode), &[], &["cond"]),
        Node::looped(
            "denoise",
            Arc::new(ToyLoop { step_time: Duration::from_millis(step_ms) }),
            &["cond"],
            &["latents"],
        ),
    ];
    let spec = PipelineSpec::new("toy", vec![TaskType::T2v], nodes, &[], "latents").unwrap();
    let model = EngineModel {
        id: "toy".into(),
        limits: limits(),
        spec: Arc::new(spec),
        device: Device::Cpu,
        check: Box::new(|r| {
            if r.plugin_params.contains_key("nope") {
                return Err(fastvideo_request::RequestError::new("plugin_params.nope", "no such plugin"));
            }
            Ok(())
        }),
        work: wan_tokens(),
        classify: |_| "pipeline_failed",
        weights: None,
        adapters: None,
        residency: None,
    };
    let mut registry = prometheus_client::registry::Registry::default();
    Engine::start(model, cfg, Metrics::register(&mut registry))
}

fn req(id: &str, prompt: &str, steps: u32) -> OmniRequest {
    let mut r = OmniRequest::text_to_video(id, prompt);
    r.diffusion.num_inference_steps = Some(steps);
    r
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// Submits a long and then a short job and returns the ids in completion order.
fn completion_order(policy: Policy) -> Vec<String> {
    rt().block_on(async {
        let e = engine(EngineConfig { policy, ..Default::default() }, 2);
        let mut long = e.submit(req("long", "p", 50)).unwrap();
        // Let the long job get going before the short one arrives.
        while let Some(ev) = long.events.recv().await {
            if matches!(ev, OmniEvent::Progress { step: 3, .. }) {
                break;
            }
        }
        let short = e.submit(req("short", "p", 4)).unwrap();
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (o1, o2) = (order.clone(), order.clone());
        let a = tokio::spawn(async move {
            long.output.await.unwrap().unwrap();
            o1.lock().unwrap().push("long".to_string());
        });
        let b = tokio::spawn(async move {
            short.wait().await.unwrap();
            o2.lock().unwrap().push("short".to_string());
        });
        a.await.unwrap();
        b.await.unwrap();
        let v = order.lock().unwrap().clone();
        v
    })
}

#[test]
fn a_short_job_overtakes_a_running_long_one_under_the_step_scheduler() {
    assert_eq!(completion_order(Policy::ShortestRemaining), ["short", "long"]);
}

#[test]
fn fifo_baseline_makes_the_short_job_wait() {
    assert_eq!(completion_order(Policy::Fifo), ["long", "short"]);
}

#[test]
fn every_step_streams_a_progress_event_then_done() {
    rt().block_on(async {
        let e = engine(EngineConfig::default(), 0);
        let mut h = e.submit(req("a", "p", 7)).unwrap();
        let mut steps = Vec::new();
        let mut done = false;
        while let Some(ev) = h.events.recv().await {
            match ev {
                OmniEvent::Progress { step, total_steps, .. } => {
                    assert_eq!(total_steps, 7);
                    steps.push(step);
                }
                OmniEvent::Done { .. } => done = true,
                _ => {}
            }
        }
        assert_eq!(steps, (1..=7).collect::<Vec<_>>());
        assert!(done);
        let out = h.output.await.unwrap().unwrap();
        assert_eq!(out.metrics.step_seconds.len(), 7);
        assert_eq!(e.live(), 0);
    });
}

#[test]
fn cancel_stops_within_one_step_and_drops_the_state() {
    rt().block_on(async {
        let e = engine(EngineConfig::default(), 5);
        let mut h = e.submit(req("c", "counted", 500)).unwrap();
        let mut started_at_cancel = 0;
        while let Some(ev) = h.events.recv().await {
            if let OmniEvent::Progress { step: 3, .. } = ev {
                // Steps started so far; the executor may be inside one more when the cancel lands.
                started_at_cancel = COUNTED_STEPS.load(Ordering::SeqCst);
                assert!(e.cancel("c"));
                break;
            }
        }
        let mut error = None;
        while let Some(ev) = h.events.recv().await {
            if let OmniEvent::Error { code, .. } = ev {
                error = Some(code);
            }
        }
        let ran = COUNTED_STEPS.load(Ordering::SeqCst);
        assert!(ran <= started_at_cancel + 1, "{} steps started after the cancel", ran - started_at_cancel);
        assert_eq!(error.as_deref(), Some("cancelled"));
        assert_eq!(h.output.await.unwrap(), Err(EngineError::Cancelled));
        assert_eq!(e.live(), 0);
        assert_eq!(LIVE_STATES.load(Ordering::SeqCst), 0, "the loop state was not dropped");
        assert!(!e.cancel("c"), "a finished request is not live");
    });
}

#[test]
fn a_failing_or_panicking_request_fails_alone() {
    rt().block_on(async {
        let e = engine(EngineConfig::default(), 1);
        let good = e.submit(req("good", "p", 20)).unwrap();
        let bad = e.submit(req("bad", "fail", 20)).unwrap();
        let boom = e.submit(req("boom", "panic", 20)).unwrap();
        let good2 = e.submit(req("good2", "p", 5)).unwrap();
        match bad.wait().await {
            Err(EngineError::Failed { code, message }) => {
                assert_eq!(code, "pipeline_failed");
                assert!(message.contains("toy failure") && message.contains("step 3"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        match boom.wait().await {
            Err(EngineError::Failed { code, message }) => {
                assert_eq!(code, "internal_error");
                assert!(message.contains("toy panic") && message.contains("denoise"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(good.wait().await.unwrap().metrics.step_seconds.len(), 20);
        assert_eq!(good2.wait().await.unwrap().metrics.step_seconds.len(), 5);
        // The engine still serves.
        assert!(e.submit(req("after", "p", 2)).unwrap().wait().await.is_ok());
    });
}

#[test]
fn fifty_concurrent_mixed_requests_all_complete_once() {
    rt().block_on(async {
        let e = engine(EngineConfig { max_active: 8, ..Default::default() }, 0);
        let handles: Vec<_> = (0..50)
            .map(|i| {
                let mut r = req(&format!("r{i}"), "p", 1 + (i * 7) % 30);
                r.priority = (i % 3) as i32;
                e.submit(r).unwrap()
            })
            .collect();
        let mut ids = std::collections::BTreeSet::new();
        for (i, h) in handles.into_iter().enumerate() {
            let out = h.wait().await.unwrap();
            assert_eq!(out.request_id, format!("r{i}"));
            assert_eq!(out.metrics.step_seconds.len() as u32, 1 + (i as u32 * 7) % 30);
            assert!(ids.insert(out.request_id));
        }
        assert_eq!(ids.len(), 50);
        assert_eq!(e.live(), 0);
    });
}

#[test]
fn admission_refuses_with_the_field_named() {
    let e = engine(EngineConfig { memory_bytes: 64 << 20, max_queue: 2, ..Default::default() }, 50);
    let err = |r| e.submit(r).err().unwrap();
    let mut bad = req("x", "p", 4);
    bad.diffusion.num_frames = Some(6);
    let got = err(bad);
    assert_eq!(got.field(), Some("diffusion.num_frames"), "{got}");
    let mut huge = req("x", "p", 4);
    huge.diffusion.width = Some(4096);
    huge.diffusion.height = Some(4096);
    huge.diffusion.num_frames = Some(81);
    let got = err(huge);
    assert_eq!(got.code(), "request_too_large");
    assert!(got.to_string().contains("MiB"), "{got}");
    let mut plugin = req("x", "p", 4);
    plugin.plugin_params.insert("nope".into(), serde_json::json!({}));
    assert_eq!(err(plugin).field(), Some("plugin_params.nope"));
    let _a = e.submit(req("a", "p", 100)).unwrap();
    assert_eq!(err(req("a", "p", 1)), EngineError::Duplicate("a".into()));
    let _b = e.submit(req("b", "p", 100)).unwrap();
    assert_eq!(err(req("c", "p", 1)).code(), "queue_full");
    e.drain(true);
    assert_eq!(err(req("d", "p", 1)), EngineError::Draining);
    rt().block_on(e.idle());
    assert_eq!(e.live(), 0);
}

#[test]
fn max_request_seconds_refuses_predicted_long_jobs() {
    let cfg = EngineConfig { max_request_seconds: Some(1e-4), ..Default::default() };
    let e = engine(cfg, 0);
    let got = e.submit(req("x", "p", 1000)).err().unwrap();
    assert_eq!(got.field(), Some("num_inference_steps"));
}

#[test]
fn measured_steps_calibrate_the_prediction() {
    rt().block_on(async {
        let e = engine(EngineConfig::default(), 20);
        let resolved = req("x", "p", 10).resolve(e.limits(), || 1).unwrap();
        let prior = e.predict(&resolved);
        e.submit(req("warm", "p", 10)).unwrap().wait().await.unwrap();
        let learned = e.predict(&resolved);
        // 10 steps of ~20 ms: the learned figure is near 0.2 s whatever the prior said.
        assert!((0.15..0.6).contains(&learned), "prior {prior}, learned {learned}");
    });
}

/// The in-process rollout API: prompts × K samples, each its own request with seed
/// `seed + p·K + k`, arriving as they finish; a failing sample fails alone; bad input is refused
/// before anything is admitted.
#[test]
fn rollouts_run_groups_and_report_each_sample() {
    use fastvideo_engine::RolloutRequest;
    let rt = rt();
    rt.block_on(async {
        let e = engine(EngineConfig::default(), 1);
        let r = RolloutRequest {
            prompts: vec!["a".into(), "fail".into(), "c".into()],
            group_size: 2,
            seed: Some(40),
            sampler: Some(SamplerKind::Euler),
            num_inference_steps: Some(3),
            return_latents: false,
            return_trajectory: false,
            ..Default::default()
        };
        let mut roll = e.rollouts(&r, "roll", 0).unwrap();
        assert_eq!(roll.total, 6);
        let (mut ok, mut failed) = (Vec::new(), Vec::new());
        while let Some(s) = roll.samples.recv().await {
            match s {
                Ok(s) => {
                    assert_eq!(s.seed, 40 + s.prompt_index as u64 * 2 + s.group_index as u64);
                    assert_eq!(s.output.metrics.seed, s.seed);
                    assert_eq!(s.prompt, r.prompts[s.prompt_index]);
                    ok.push((s.prompt_index, s.group_index));
                }
                Err(f) => {
                    assert!(matches!(&f.error, EngineError::Failed { message, .. } if message.contains("toy failure")));
                    failed.push((f.prompt_index, f.group_index));
                }
            }
        }
        ok.sort();
        failed.sort();
        assert_eq!(ok, [(0, 0), (0, 1), (2, 0), (2, 1)]);
        assert_eq!(failed, [(1, 0), (1, 1)]);
        // Refused whole, naming the field; nothing was admitted.
        let bad = RolloutRequest { prompts: vec!["a".into()], group_size: 0, ..Default::default() };
        let Err(EngineError::Invalid(err)) = e.rollouts(&bad, "bad", 0) else { panic!("group_size 0 accepted") };
        assert_eq!(err.field, "group_size");
        assert_eq!(e.live(), 0);
    });
}

mod models;
