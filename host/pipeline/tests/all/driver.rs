//! The loop contract and driver on a toy denoiser whose answer is known in closed form:
//! velocity = latents * (scalar context), so Euler with CFG multiplies the latents by
//! `Π (1 + dt_i * (u + g (c - u)))`.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Result;
use fastvideo_pipeline::denoise::seeded_noise;
use fastvideo_pipeline::sampler::{FlowMatchEuler, Sampler};
use fastvideo_pipeline::{
    Advance, CancelToken, ClassicCfg, Conditioning, DenoiseLoop, Denoiser, Node, NodeCtx, Observed, Observer,
    ObserverState, PipelineRun, PipelineSpec, PluginMeter, SpecError, Stage, StepCtx, StepPolicy, StepPolicyState,
    Value, Values,
};
use fastvideo_request::{Defaults, ModelLimits, OmniEvent, OmniRequest, ResolvedRequest, SamplerKind, TaskType};
use tch::{Device, Tensor};

/// A preview that reports the latents' mean, so the test sees which estimate it was given.
struct ToyPreview;
impl fastvideo_pipeline::LatentPreview for ToyPreview {
    fn preview(&self, latents: &Tensor) -> Result<(u32, u32, Vec<u8>)> {
        Ok((1, 1, latents.mean(tch::Kind::Float).double_value(&[]).to_string().into_bytes()))
    }
}

struct Toy;
impl Denoiser for Toy {
    fn forward(&self, latents: &Tensor, _t: &Tensor, cond: Conditioning) -> Result<Tensor> {
        Ok(latents * cond.text)
    }
    fn latent_shape(&self, _req: &ResolvedRequest) -> Vec<i64> {
        vec![1, 2, 1, 2, 2]
    }
}

/// Writes the scalar contexts: cond = 2, uncond = 1.
struct Contexts;
impl Stage for Contexts {
    fn run(&self, _ctx: &NodeCtx, values: &mut Values) -> Result<()> {
        values.insert("cond", Value::Tensor(Tensor::from(2f32)));
        values.insert("uncond", Value::Tensor(Tensor::from(1f32)));
        Ok(())
    }
}

struct Fails;
impl Stage for Fails {
    fn run(&self, _ctx: &NodeCtx, _values: &mut Values) -> Result<()> {
        anyhow::bail!("decoder exploded")
    }
}

fn spec(tail: Option<Arc<dyn Stage>>) -> PipelineSpec {
    spec_with(tail, None, Vec::new())
}

fn spec_with(
    tail: Option<Arc<dyn Stage>>,
    steps: Option<Arc<dyn StepPolicy>>,
    observers: Vec<Arc<dyn Observer>>,
) -> PipelineSpec {
    let denoise = DenoiseLoop {
        denoiser: Arc::new(Toy),
        guidance: Arc::new(ClassicCfg),
        blocks: None,
        steps,
        routing: None,
        contexts: BTreeMap::from([("cond".into(), "cond".into()), ("uncond".into(), "uncond".into())]),
        initial_latents: "init".into(),
        clean_latents: "clean_latents".into(),
        image_embeds: "image_embeds".into(),
        latent_condition: "latent_condition".into(),
        condition: Arc::new(fastvideo_pipeline::ChannelCondition),
        output: "latents".into(),
        preview: Some(Arc::new(ToyPreview)),
    };
    let mut nodes = vec![
        Node::stage("contexts", Arc::new(Contexts), &[], &["cond", "uncond"]),
        Node::looped("denoise", Arc::new(denoise), &["cond"], &["latents"]),
    ];
    if let Some(t) = tail {
        nodes.push(Node::stage("tail", t, &["latents"], &[]));
    }
    PipelineSpec::new("toy", vec![TaskType::T2v], nodes, &[], "latents").unwrap().with_observers(observers)
}

fn request(steps: u32, guidance: f32) -> ResolvedRequest {
    let limits = ModelLimits {
        family: "Toy".into(),
        tasks: vec![TaskType::T2v],
        image_roles: Vec::new(),
        video: Some(fastvideo_request::VideoLimits { frame_multiple: 4, max_frames: 81 }),
        picture: Some(fastvideo_request::PictureLimits { spatial_multiple: 16, max_side: 512 }),
        audio: None,
        action: None,
        references: None,
        max_steps: 100,
        defaults: Defaults {
            steps,
            guidance_scale: guidance,
            shift: 3.0,
            height: 32,
            width: 32,
            num_frames: 1,
            fps: 8,
            sampler: SamplerKind::Euler,
            negative_prompt: String::new(),
            timesteps: None,
            knobs: Default::default(),
        },
    };
    let mut r = OmniRequest::text_to_video("toy-1", "p").resolve(&limits, || 11).unwrap();
    r.outputs.return_latents = true;
    r
}

#[test]
fn the_runtime_owns_iteration_and_matches_the_closed_form() {
    let (steps, g) = (5u32, 4.0f32);
    let req = request(steps, g);
    let mut run =
        PipelineRun::new(Arc::new(spec(None)), req.clone(), Device::Cpu, Values::default(), CancelToken::default());
    let mut events = Vec::new();
    let mut advances = 0;
    while run.advance(&mut |e| events.push(e)).unwrap() == Advance::Worked {
        advances += 1;
    }
    // contexts + init + 5 steps + finalize.
    assert_eq!(advances, 1 + 1 + steps as usize + 1);
    let progress: Vec<u32> = events
        .iter()
        .filter_map(|e| if let OmniEvent::Progress { step, .. } = e { Some(*step) } else { None })
        .collect();
    assert_eq!(progress, (1..=steps).collect::<Vec<_>>());
    let out = run.finish(&mut |e| events.push(e)).unwrap();
    assert_eq!(out.metrics.forwards, 2 * steps, "two branches per step with guidance > 1");
    let n = events.len();
    assert!(matches!(&events[n - 2], OmniEvent::Artifact { name, .. } if name == "latents"), "{:?}", events[n - 2]);
    assert!(matches!(&events[n - 1], OmniEvent::Done { metrics, .. } if metrics.forwards == 2 * steps));

    let sched = FlowMatchEuler::new(steps as usize, 3.0);
    let sig = sched.sigmas();
    let factor: f64 =
        (0..steps as usize).map(|i| 1.0 + (sig[i + 1] - sig[i]) as f64 * (1.0 + g as f64 * (2.0 - 1.0))).product();
    let x0 = seeded_noise(&[1, 2, 1, 2, 2], req.seed, Device::Cpu);
    let want = Vec::<f32>::try_from(x0.flatten(0, -1) * factor).unwrap();
    let Some(fastvideo_request::Artifact::Latents(l)) = out.artifacts.get("latents") else { panic!("latents") };
    for (a, b) in l.data.iter().zip(&want) {
        assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{a} vs {b}");
    }
}

#[test]
fn guidance_of_one_runs_a_single_branch() {
    let mut run =
        PipelineRun::new(Arc::new(spec(None)), request(3, 1.0), Device::Cpu, Values::default(), CancelToken::default());
    run.run_to_end(&mut |_| {}).unwrap();
    assert_eq!(run.finish(&mut |_| {}).unwrap().metrics.forwards, 3);
}

#[test]
fn cancellation_stops_at_the_next_step_boundary() {
    let cancel = CancelToken::default();
    let mut run =
        PipelineRun::new(Arc::new(spec(None)), request(10, 5.0), Device::Cpu, Values::default(), cancel.clone());
    let mut steps = 0;
    let err = loop {
        match run.advance(&mut |e| {
            if matches!(e, OmniEvent::Progress { .. }) {
                steps += 1;
            }
        }) {
            Ok(_) if steps == 2 => cancel.cancel(),
            Ok(_) => {}
            Err(e) => break e,
        }
    };
    assert_eq!(steps, 2, "no step runs after cancel");
    assert_eq!(err.to_string(), "cancelled");
}

#[test]
fn a_failing_node_is_named_in_the_error() {
    let mut run = PipelineRun::new(
        Arc::new(spec(Some(Arc::new(Fails)))),
        request(2, 5.0),
        Device::Cpu,
        Values::default(),
        CancelToken::default(),
    );
    let err = run.run_to_end(&mut |_| {}).unwrap_err();
    assert_eq!(format!("{err:#}"), "node `tail`: decoder exploded");
}

#[test]
fn wrong_initial_latents_are_refused_with_both_shapes() {
    let mut init = Values::default();
    init.insert("init", Value::Tensor(Tensor::zeros([1, 2, 3], (tch::Kind::Float, Device::Cpu))));
    let mut run = PipelineRun::new(Arc::new(spec(None)), request(2, 5.0), Device::Cpu, init, CancelToken::default());
    let err = format!("{:#}", run.run_to_end(&mut |_| {}).unwrap_err());
    assert!(err.contains("[1, 2, 3]") && err.contains("[1, 2, 1, 2, 2]"), "{err}");
}

#[test]
fn spec_validation_catches_wiring_mistakes() {
    let stage: Arc<dyn Stage> = Arc::new(Contexts);
    let dup = PipelineSpec::new(
        "p",
        vec![TaskType::T2v],
        vec![Node::stage("a", stage.clone(), &[], &[]), Node::stage("a", stage.clone(), &[], &[])],
        &[],
        "x",
    );
    assert!(matches!(dup, Err(SpecError::DuplicateNode { .. })));
    let missing =
        PipelineSpec::new("p", vec![TaskType::T2v], vec![Node::stage("a", stage.clone(), &["nope"], &[])], &[], "x");
    assert_eq!(
        missing.err().unwrap().to_string(),
        "pipeline `p`: node `a` reads `nope`, which no earlier node produces"
    );
    let no_loop = PipelineSpec::new("p", vec![TaskType::T2v], vec![Node::stage("a", stage, &[], &["x"])], &[], "x");
    assert!(matches!(no_loop, Err(SpecError::NoLoop { .. })));
}

#[test]
fn seeded_noise_is_deterministic_and_standard_normal() {
    let a = seeded_noise(&[4, 64, 64], 42, Device::Cpu);
    let b = seeded_noise(&[4, 64, 64], 42, Device::Cpu);
    let c = seeded_noise(&[4, 64, 64], 43, Device::Cpu);
    assert!(a.equal(&b));
    assert!(!a.equal(&c));
    let mean = a.mean(tch::Kind::Float).double_value(&[]);
    let std = a.std(true).double_value(&[]);
    assert!(mean.abs() < 0.03 && (std - 1.0).abs() < 0.03, "mean {mean} std {std}");
}

/// Supplies the previous step's output on every odd step (a crude step cache), and records the
/// steps it was shown after.
struct ReuseOdd {
    seen: Arc<std::sync::Mutex<Vec<u32>>>,
    wrong_shape: bool,
}
struct ReuseOddState {
    last: Option<Tensor>,
    seen: Arc<std::sync::Mutex<Vec<u32>>>,
    wrong_shape: bool,
}
impl StepPolicy for ReuseOdd {
    fn init(&self, _req: &ResolvedRequest, _: &PluginMeter) -> Result<Box<dyn StepPolicyState>> {
        Ok(Box::new(ReuseOddState { last: None, seen: self.seen.clone(), wrong_shape: self.wrong_shape }))
    }
}
impl StepPolicyState for ReuseOddState {
    fn before_step(&mut self, step: &StepCtx, _latents: &Tensor) -> Result<Option<Tensor>> {
        if self.wrong_shape {
            return Ok(Some(Tensor::zeros([3], (tch::Kind::Float, Device::Cpu))));
        }
        Ok(if step.step_index % 2 == 1 { self.last.as_ref().map(|t| t.shallow_clone()) } else { None })
    }
    fn after_step(&mut self, step: &StepCtx, output: &Tensor) -> Result<()> {
        self.seen.lock().unwrap().push(step.step_index);
        self.last = Some(output.shallow_clone());
        Ok(())
    }
}

#[test]
fn a_step_interceptor_supplies_outputs_and_the_forwards_are_skipped() {
    let (steps, g) = (5u32, 4.0f32);
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let policy: Arc<dyn StepPolicy> = Arc::new(ReuseOdd { seen: seen.clone(), wrong_shape: false });
    let req = request(steps, g);
    let mut run = PipelineRun::new(
        Arc::new(spec_with(None, Some(policy), Vec::new())),
        req.clone(),
        Device::Cpu,
        Values::default(),
        CancelToken::default(),
    );
    run.run_to_end(&mut |_| {}).unwrap();
    let out = run.finish(&mut |_| {}).unwrap();
    assert_eq!(out.metrics.forwards, 2 * 3, "steps 1 and 3 reuse the previous output: no forwards");
    assert_eq!(*seen.lock().unwrap(), vec![0, 1, 2, 3, 4], "after-step sees every step");

    // Closed form: even steps v_i = k x_i (k = u + g (c - u)); odd steps reuse v_{i-1}.
    let sig = FlowMatchEuler::new(steps as usize, 3.0).sigmas().to_vec();
    let k = 1.0 + g as f64;
    let x0 = Vec::<f32>::try_from(seeded_noise(&[1, 2, 1, 2, 2], req.seed, Device::Cpu).flatten(0, -1)).unwrap();
    let Some(fastvideo_request::Artifact::Latents(l)) = out.artifacts.get("latents") else { panic!("latents") };
    for (a, &x) in l.data.iter().zip(&x0) {
        let (mut x, mut v) = (x as f64, 0.0);
        for i in 0..steps as usize {
            if i % 2 == 0 {
                v = k * x;
            }
            x += (sig[i + 1] - sig[i]) as f64 * v;
        }
        assert!((*a as f64 - x).abs() <= 1e-5 * x.abs().max(1.0), "{a} vs {x}");
    }
}

#[test]
fn a_step_interceptor_output_of_the_wrong_shape_fails_the_request() {
    let policy: Arc<dyn StepPolicy> = Arc::new(ReuseOdd { seen: Default::default(), wrong_shape: true });
    let mut run = PipelineRun::new(
        Arc::new(spec_with(None, Some(policy), Vec::new())),
        request(2, 4.0),
        Device::Cpu,
        Values::default(),
        CancelToken::default(),
    );
    let err = format!("{:#}", run.run_to_end(&mut |_| {}).unwrap_err());
    assert!(err.contains("node `denoise` step 1") && err.contains("[3]") && err.contains("[1, 2, 1, 2, 2]"), "{err}");
}

/// Records what it is shown as short strings; emits a plugin event per step end; fails on
/// `fail_at` (an event label) when set.
struct Recorder {
    log: Arc<std::sync::Mutex<Vec<String>>>,
    fail_at: Option<&'static str>,
}
struct RecorderState(Arc<std::sync::Mutex<Vec<String>>>, Option<&'static str>);
impl Observer for Recorder {
    fn init(&self, _req: &ResolvedRequest, _: &PluginMeter) -> Result<Box<dyn ObserverState>> {
        Ok(Box::new(RecorderState(self.log.clone(), self.fail_at)))
    }
}
impl ObserverState for RecorderState {
    fn on_event(&mut self, event: Observed, output: Option<&Tensor>, emit: &mut dyn FnMut(OmniEvent)) -> Result<()> {
        let label = match event {
            Observed::RequestStart => "request-start".to_string(),
            Observed::NodeStart(n) => format!("node-start {n}"),
            Observed::NodeEnd(n) => format!("node-end {n}"),
            Observed::StepStart(s) => format!("step-start {}/{}", s.step_index, s.num_steps),
            Observed::StepEnd(s) => {
                let out = output.map(|t| format!("{:?}", t.size())).unwrap_or_default();
                emit(OmniEvent::Plugin {
                    request_id: "toy-1".into(),
                    plugin: "recorder".into(),
                    name: "step".into(),
                    payload: serde_json::json!({ "step": s.step_index }),
                });
                format!("step-end {} {out}", s.step_index)
            }
            Observed::Artifact(n) => format!("artifact {n}"),
            Observed::RequestEnd(o) => format!("request-end {o}"),
        };
        self.0.lock().unwrap().push(label.clone());
        if self.1.is_some_and(|f| label.starts_with(f)) {
            anyhow::bail!("observer refused at {label}");
        }
        Ok(())
    }
}

fn observed_run(
    tail: Option<Arc<dyn Stage>>,
    fail_at: Option<&'static str>,
) -> (PipelineRun, Arc<std::sync::Mutex<Vec<String>>>) {
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let obs: Arc<dyn Observer> = Arc::new(Recorder { log: log.clone(), fail_at });
    let run = PipelineRun::new(
        Arc::new(spec_with(tail, None, vec![obs])),
        request(2, 4.0),
        Device::Cpu,
        Values::default(),
        CancelToken::default(),
    );
    (run, log)
}

#[test]
fn observers_see_the_whole_request_in_order_and_their_events_are_streamed() {
    let (mut run, log) = observed_run(None, None);
    let mut events = Vec::new();
    run.run_to_end(&mut |e| events.push(e)).unwrap();
    run.finish(&mut |e| events.push(e)).unwrap();
    let want = [
        "request-start",
        "node-start contexts",
        "node-end contexts",
        "node-start denoise",
        "step-start 0/2",
        "step-end 0 [1, 2, 1, 2, 2]",
        "step-start 1/2",
        "step-end 1 [1, 2, 1, 2, 2]",
        "node-end denoise",
        "artifact latents",
        "request-end completed",
    ];
    assert_eq!(*log.lock().unwrap(), want);
    let steps: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            OmniEvent::Plugin { plugin, payload, .. } if plugin == "recorder" => {
                Some(payload["step"].as_u64().unwrap())
            }
            _ => None,
        })
        .collect();
    assert_eq!(steps, vec![0, 1]);
}

#[test]
fn observers_hear_how_a_request_ended_and_an_observer_error_fails_it() {
    let (mut run, log) = observed_run(Some(Arc::new(Fails)), None);
    run.run_to_end(&mut |_| {}).unwrap_err();
    assert_eq!(log.lock().unwrap().last().unwrap(), "request-end failed");

    // Ended from outside (the engine cancelling a run it will not advance again): once.
    let (mut run, log) = observed_run(None, None);
    run.advance(&mut |_| {}).unwrap();
    run.abort("cancelled", &mut |_| {});
    run.abort("cancelled", &mut |_| {});
    assert_eq!(log.lock().unwrap().iter().filter(|l| l.starts_with("request-end")).count(), 1);
    assert_eq!(log.lock().unwrap().last().unwrap(), "request-end cancelled");

    let (mut run, log) = observed_run(None, Some("step-start 1"));
    let err = format!("{:#}", run.run_to_end(&mut |_| {}).unwrap_err());
    assert_eq!(err, "observer refused at step-start 1/2");
    let log = log.lock().unwrap();
    assert!(!log.iter().any(|l| l.starts_with("step-end 1")), "the step does not run: {log:?}");
    assert_eq!(log.last().unwrap(), "request-end failed");
}

#[test]
fn observed_or_intercepted_runs_are_not_batched() {
    let (run, _) = observed_run(None, None);
    let mut run = run;
    run.advance(&mut |_| {}).unwrap(); // contexts
    run.advance(&mut |_| {}).unwrap(); // loop init
    assert_eq!(run.batch_key(), None);
    let mut plain =
        PipelineRun::new(Arc::new(spec(None)), request(2, 4.0), Device::Cpu, Values::default(), CancelToken::default());
    plain.advance(&mut |_| {}).unwrap();
    plain.advance(&mut |_| {}).unwrap();
    assert!(plain.batch_key().is_some());
}

/// Writes a one-frame "video" under the spec's final output name.
struct Clip;
impl Stage for Clip {
    fn run(&self, _ctx: &NodeCtx, values: &mut Values) -> Result<()> {
        let v = fastvideo_request::VideoArtifact { fps: 8, num_frames: 1, height: 1, width: 1, rgb: vec![1, 2, 3] };
        values.insert("clip", Value::Video(v));
        Ok(())
    }
}

#[test]
fn the_artifact_is_the_value_the_spec_names_as_its_final_output() {
    let denoise = DenoiseLoop {
        denoiser: Arc::new(Toy),
        guidance: Arc::new(ClassicCfg),
        blocks: None,
        steps: None,
        routing: None,
        contexts: BTreeMap::from([("cond".into(), "cond".into()), ("uncond".into(), "uncond".into())]),
        initial_latents: "init".into(),
        clean_latents: "clean_latents".into(),
        image_embeds: "image_embeds".into(),
        latent_condition: "latent_condition".into(),
        condition: Arc::new(fastvideo_pipeline::ChannelCondition),
        output: "latents".into(),
        preview: Some(Arc::new(ToyPreview)),
    };
    let nodes = vec![
        Node::stage("contexts", Arc::new(Contexts), &[], &["cond", "uncond"]),
        Node::looped("denoise", Arc::new(denoise), &["cond"], &["latents"]),
        Node::stage("clip", Arc::new(Clip), &["latents"], &["clip"]),
    ];
    let spec = Arc::new(PipelineSpec::new("toy", vec![TaskType::T2v], nodes, &[], "clip").unwrap());
    assert_eq!(spec.final_output, "clip");
    let mut run = PipelineRun::new(spec, request(2, 1.0), Device::Cpu, Values::default(), Default::default());
    run.run_to_end(&mut |_| {}).unwrap();
    let out = run.finish(&mut |_| {}).unwrap();
    assert!(out.artifacts.contains_key("clip") && !out.artifacts.contains_key("video"), "{:?}", out.artifacts.keys());
}

#[test]
fn previews_come_every_n_steps_only_when_asked() {
    use base64::Engine as _;
    let spec = Arc::new(spec_with(None, None, Vec::new()));
    let previews = |every: Option<u32>| {
        let mut r = request(7, 4.0);
        r.outputs.preview_every = every;
        let mut run = PipelineRun::new(spec.clone(), r, Device::Cpu, Values::default(), Default::default());
        let mut seen = Vec::new();
        run.run_to_end(&mut |e| {
            if let OmniEvent::Preview { step, jpeg_b64, .. } = e {
                let text = base64::engine::general_purpose::STANDARD.decode(jpeg_b64).unwrap();
                seen.push((step, String::from_utf8(text).unwrap().parse::<f64>().unwrap()));
            }
        })
        .unwrap();
        seen
    };
    assert!(previews(None).is_empty(), "no previews unless asked");
    let got = previews(Some(3));
    assert_eq!(got.iter().map(|p| p.0).collect::<Vec<_>>(), [3, 6]);
    assert!(got.iter().all(|p| p.1.is_finite()));
}

/// Writes the text value the prompt extension would.
struct Rewrites;
impl Stage for Rewrites {
    fn run(&self, ctx: &NodeCtx, values: &mut Values) -> Result<()> {
        values.insert(fastvideo_pipeline::EXTENDED_PROMPT, Value::Text(format!("{} (rewritten)", ctx.request.prompt)));
        Ok(())
    }
}

#[test]
fn a_gated_node_runs_only_for_requests_it_accepts_and_its_text_reaches_the_output() {
    let mut spec = spec(None);
    let gated = Node::stage("rewrite", Arc::new(Rewrites), &[], &[fastvideo_pipeline::EXTENDED_PROMPT])
        .when(|r| r.prompt_extend);
    spec.nodes.insert(0, gated);
    let spec = Arc::new(spec);
    let names = |extend: bool| {
        let mut req = request(2, 1.0);
        req.prompt_extend = extend;
        let mut run = PipelineRun::new(spec.clone(), req, Device::Cpu, Values::default(), CancelToken::default());
        let mut started = Vec::new();
        run.run_to_end(&mut |e| {
            if let OmniEvent::NodeStarted { node, .. } = e {
                started.push(node);
            }
        })
        .unwrap();
        (started, run.finish(&mut |_| {}).unwrap().extended_prompt)
    };
    assert_eq!(names(false), (vec!["contexts".to_string(), "denoise".into()], None));
    assert_eq!(
        names(true),
        (vec!["rewrite".to_string(), "contexts".into(), "denoise".into()], Some("p (rewritten)".to_string()))
    );
}

/// `node_params` against the nodes: a node's schema checks its value (the error names the key);
/// in a pipeline with such nodes an unknown node is refused naming the ones that take
/// parameters; a pipeline without any leaves other names to whoever reads them.
#[test]
fn node_params_are_checked_against_the_nodes_schemas() {
    let plain = spec(None);
    let schema = serde_json::json!({
        "type": "object",
        "properties": {"strength": {"type": "number", "minimum": 0, "maximum": 1}},
        "additionalProperties": false
    });
    let mut nodes = plain.nodes.clone();
    nodes[0] = nodes[0].clone().with_params(schema).unwrap();
    let with = PipelineSpec::new("toy", vec![TaskType::T2v], nodes, &[], "latents").unwrap();
    let req = |params: serde_json::Value| {
        let mut r = request(2, 1.0);
        r.node_params = serde_json::from_value(params).unwrap();
        r
    };
    assert!(with.check_node_params(&req(serde_json::json!({"contexts": {"strength": 0.5}}))).is_ok());
    let e = with.check_node_params(&req(serde_json::json!({"contexts": {"strength": 2}}))).unwrap_err();
    assert_eq!(e.field, "node_params.contexts.strength", "{e}");
    let e = with.check_node_params(&req(serde_json::json!({"contexts": {"x": 1}}))).unwrap_err();
    assert_eq!(e.field, "node_params.contexts", "{e}");
    let e = with.check_node_params(&req(serde_json::json!({"rollout": {}}))).unwrap_err();
    assert!(e.field == "node_params.rollout" && e.rule.contains("nodes taking parameters: contexts"), "{e}");
    assert!(plain.check_node_params(&req(serde_json::json!({"rollout": {"chunk": 3}}))).is_ok());
    // A schema that does not compile is a wiring mistake, caught when the node is built.
    let bad = Node::stage("x", Arc::new(Contexts), &[], &[]).with_params(serde_json::json!({"type": 7}));
    assert!(bad.is_err());
}
