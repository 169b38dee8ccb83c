//! Several models on one engine: requests picked by `model`, and whose weights stay on the
//! device under a bound on how many (or how many bytes) may.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use fastvideo_engine::{Engine, EngineConfig, EngineError, EngineModel, Metrics};
use fastvideo_pipeline::{LoopStage, LoopState, Node, NodeCtx, PipelineSpec, StepResult, Value, Values};
use fastvideo_request::TaskType;
use tch::{Device, Tensor};

use super::{limits, req, rt, wan_tokens};

/// A loop whose result says which model ran it: `scale` × its step count.
struct ScaledLoop(f32);

impl LoopStage for ScaledLoop {
    fn init(&self, ctx: &NodeCtx, _values: &mut Values) -> Result<LoopState> {
        Ok(LoopState { step: 0, total_steps: ctx.request.steps, inner: Box::new(()) })
    }
    fn step(&self, _ctx: &NodeCtx, _state: &mut LoopState) -> Result<StepResult> {
        std::thread::sleep(Duration::from_millis(2));
        Ok(StepResult { done: false, forwards: 1, ..Default::default() })
    }
    fn finalize(&self, _ctx: &NodeCtx, state: LoopState, values: &mut Values) -> Result<()> {
        values.insert("latents", Value::Tensor(Tensor::from(state.step as f32 * self.0)));
        Ok(())
    }
}

/// Which toy models are "on the device": sleep and wake flip a flag; the most at once is kept.
#[derive(Default)]
struct Devices {
    on: Vec<bool>,
    most: usize,
    wakes: usize,
    /// What a wake takes (a transformer crossing PCIe).
    wake_ms: u64,
    /// Each model's bytes, and the most that were on the device together after a wake.
    sizes: Vec<u64>,
    most_bytes: u64,
}

/// Model `.0` on `.1`: `.2` bytes; `.3`: on the device from the start (false: loaded lazily).
struct ToyResidency(usize, Arc<std::sync::Mutex<Devices>>, u64, bool);

impl fastvideo_engine::Residency for ToyResidency {
    fn sleep(&self) -> Result<()> {
        self.1.lock().unwrap().on[self.0] = false;
        Ok(())
    }
    fn wake(&self) -> Result<()> {
        let ms = self.1.lock().unwrap().wake_ms;
        std::thread::sleep(Duration::from_millis(ms));
        let mut d = self.1.lock().unwrap();
        d.on[self.0] = true;
        d.wakes += 1;
        d.most = d.most.max(d.on.iter().filter(|o| **o).count());
        let bytes = d.on.iter().zip(&d.sizes).filter(|(o, _)| **o).map(|(_, b)| b).sum();
        d.most_bytes = d.most_bytes.max(bytes);
        Ok(())
    }
    fn bytes(&self) -> u64 {
        self.2
    }
    fn is_resident(&self) -> bool {
        self.3
    }
}

/// An engine serving toy models `a`, `b` and `c` (the primary first) whose latents are the step
/// count times `scales[i]`, each moved by a [`ToyResidency`] of `sizes[i]` bytes on `devices`
/// (resident from the start where `devices.on` says), under `cfg`.
fn toy_engine(
    devices: &Arc<std::sync::Mutex<Devices>>,
    scales: [f32; 3],
    sizes: [u64; 3],
    cfg: EngineConfig,
    registry: &mut prometheus_client::registry::Registry,
) -> Engine {
    let on = devices.lock().unwrap().on.clone();
    let mut models: Vec<EngineModel> = ["a", "b", "c"]
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let mut m = scaled_model(id, scales[i]);
            m.residency = Some(Arc::new(ToyResidency(i, devices.clone(), sizes[i], on[i])));
            m
        })
        .collect();
    let primary = models.remove(0);
    Engine::start_with_models(primary, models, None, cfg, Metrics::register(registry))
}

fn scaled_model(id: &str, scale: f32) -> EngineModel {
    let nodes = vec![Node::looped("denoise", Arc::new(ScaledLoop(scale)), &[], &["latents"])];
    EngineModel {
        id: id.into(),
        limits: limits(),
        spec: Arc::new(PipelineSpec::new(id, vec![TaskType::T2v], nodes, &[], "latents").unwrap()),
        device: Device::Cpu,
        check: Box::new(|_| Ok(())),
        work: wan_tokens(),
        classify: |_| "pipeline_failed",
        weights: None,
        adapters: None,
        residency: None,
    }
}

#[test]
fn requests_run_on_the_model_they_name_and_an_unknown_model_is_refused() {
    let mut registry = prometheus_client::registry::Registry::default();
    let engine = Engine::start_with_models(
        scaled_model("first", 1.0),
        vec![scaled_model("second", 10.0)],
        None,
        EngineConfig::default(),
        Metrics::register(&mut registry),
    );
    let ids: Vec<&str> = engine.models().iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, ["first", "second"]);
    assert!(engine.limits_of("second").is_some() && engine.limits_of("third").is_none());
    rt().block_on(async {
        let mut handles = Vec::new();
        for (i, model) in [None, Some("second"), Some("first"), Some("second")].into_iter().enumerate() {
            let mut r = req(&format!("r{i}"), "p", 3);
            r.model = model.map(String::from);
            r.outputs.return_latents = true;
            handles.push((model, engine.submit(r).unwrap()));
        }
        for (model, h) in handles {
            let out = h.wait().await.unwrap();
            let Some(fastvideo_request::Artifact::Latents(l)) = out.artifacts.get("latents") else {
                panic!("no latents")
            };
            let want = if model == Some("second") { 30.0 } else { 3.0 };
            assert_eq!(l.data, [want], "{model:?} ran on its own pipeline");
        }
    });
    let mut r = req("r9", "p", 3);
    r.model = Some("third".into());
    let e = engine.submit(r).err().unwrap();
    let msg = e.to_string();
    assert!(msg.contains("model") && msg.contains("`first`, `second`"), "{msg}");
}

#[test]
fn at_most_the_resident_bound_of_models_stay_on_the_device() {
    let devices = Arc::new(std::sync::Mutex::new(Devices { on: vec![true; 3], most: 3, ..Default::default() }));
    let mut registry = prometheus_client::registry::Registry::default();
    // One request at a time, so the least recently used model is always idle when another wakes.
    let cfg = EngineConfig { max_resident_models: Some(2), max_active: 1, ..EngineConfig::default() };
    let engine = toy_engine(&devices, [1.0, 10.0, 100.0], [1 << 20; 3], cfg, &mut registry);
    devices.lock().unwrap().most = 0;
    rt().block_on(async {
        let models = ["a", "b", "c", "a", "c", "b", "a"];
        let mut handles = Vec::new();
        for (i, m) in models.iter().enumerate() {
            let mut r = req(&format!("m{i}"), "p", 2);
            r.model = Some(m.to_string());
            r.outputs.return_latents = true;
            handles.push((*m, engine.submit(r).unwrap()));
        }
        for (m, h) in handles {
            let out = h.wait().await.unwrap();
            let Some(fastvideo_request::Artifact::Latents(l)) = out.artifacts.get("latents") else {
                panic!("no latents")
            };
            let scale = match m {
                "a" => 1.0,
                "b" => 10.0,
                _ => 100.0,
            };
            assert_eq!(l.data, [2.0 * scale], "{m}");
        }
        let (wakes, most) = {
            let d = devices.lock().unwrap();
            (d.wakes, d.most)
        };
        // In arrival order that would be four wakes; resident models' work goes first (the wake
        // cost is part of a sleeping model's predicted work), so `c` is brought back once or,
        // should its requests run before the later ones arrive, twice.
        assert!((1..=2).contains(&wakes), "models were brought back ({wakes} wakes)");
        assert!(most <= 2, "never more than two on the device ({most})");
        assert!(!engine.set_resident("b", false).await.unwrap());
        assert!(engine.set_resident("b", true).await.unwrap());
        assert!(matches!(engine.set_resident("zzz", false).await, Err(EngineError::Invalid(_))));
    });
}

#[test]
fn a_byte_budget_bounds_the_weights_on_the_device_and_a_lazy_model_starts_asleep() {
    const MIB: u64 = 1 << 20;
    // `a` and `b` take 2 MiB each, `c` 4 MiB and is loaded lazily; 4 MiB fit.
    let sizes = [2 * MIB, 2 * MIB, 4 * MIB];
    let devices = Arc::new(std::sync::Mutex::new(Devices {
        on: vec![true, true, false],
        sizes: sizes.to_vec(),
        ..Default::default()
    }));
    let mut registry = prometheus_client::registry::Registry::default();
    let cfg = EngineConfig { max_resident_bytes: Some(4 * MIB), max_active: 1, ..EngineConfig::default() };
    let engine = toy_engine(&devices, [1.0, 10.0, 100.0], sizes, cfg, &mut registry);
    rt().block_on(async {
        // Before any request: the lazy model was never read.
        assert_eq!(devices.lock().unwrap().wakes, 0);
        for (i, m) in ["c", "a", "b", "c"].into_iter().enumerate() {
            let mut r = req(&format!("m{i}"), "p", 2);
            r.model = Some(m.into());
            r.outputs.return_latents = true;
            let out = engine.submit(r).unwrap().wait().await.unwrap();
            let Some(fastvideo_request::Artifact::Latents(l)) = out.artifacts.get("latents") else {
                panic!("no latents")
            };
            let scale = [1.0, 10.0, 100.0][["a", "b", "c"].iter().position(|x| *x == m).unwrap()];
            assert_eq!(l.data, [2.0 * scale], "{m}");
            let d = devices.lock().unwrap();
            let held: u64 = d.on.iter().zip(&d.sizes).filter(|(o, _)| **o).map(|(_, b)| b).sum();
            assert!(held <= 4 * MIB, "after {m}: {held} bytes on the device");
        }
        let d = devices.lock().unwrap();
        // `c` woke twice (for each of its requests, `a` and `b` having come back between);
        // `a` and `b` once each.
        assert_eq!(d.wakes, 4, "wakes");
        assert!(d.most_bytes <= 4 * MIB, "never more than the budget ({})", d.most_bytes);
    });
    let text = {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        out
    };
    assert!(text.contains("fastvideo_resident_weight_bytes 4194304"), "{text}");
}

#[test]
fn a_burst_for_a_cold_model_wakes_it_once_instead_of_swapping_per_request() {
    let devices = Arc::new(std::sync::Mutex::new(Devices { on: vec![true; 3], wake_ms: 30, ..Default::default() }));
    let mut registry = prometheus_client::registry::Registry::default();
    let cfg = EngineConfig { max_resident_models: Some(2), max_active: 1, ..EngineConfig::default() };
    let engine = toy_engine(&devices, [1.0; 3], [1 << 20; 3], cfg, &mut registry);
    rt().block_on(async {
        // One request on each model, so the cost model knows them all alike; `c` wakes for its
        // and `a` (the least recently used) goes to sleep.
        for m in ["a", "b", "c"] {
            let mut r = req(&format!("warm-{m}"), "p", 2);
            r.model = Some(m.into());
            engine.submit(r).unwrap().wait().await.unwrap();
        }
        devices.lock().unwrap().wakes = 0;
        // Requests for all three arrive interleaved, each a step longer than the one before.
        // Shortest first alone would swap models on every request (5 wakes); with the wake cost
        // in `a`'s predicted work, `b`'s and `c`'s run first and `a` wakes once.
        let mut handles = Vec::new();
        for (i, m) in ["b", "a", "c", "b", "a", "c"].into_iter().enumerate() {
            let mut r = req(&format!("burst{i}"), "p", 2 + i as u32);
            r.model = Some(m.into());
            handles.push(engine.submit(r).unwrap());
        }
        for h in handles {
            h.wait().await.unwrap();
        }
        let d = devices.lock().unwrap();
        assert_eq!(d.wakes, 1, "a woke once for its two requests");
        assert!(d.most <= 2, "never more than two on the device ({})", d.most);
    });
}

/// New weights for a toy model: a pipeline scaling by the number in the path's file name.
struct ToyWeights;

impl fastvideo_engine::WeightLoader for ToyWeights {
    fn load(&self, path: &std::path::Path) -> Result<PipelineSpec> {
        let scale: f32 = path.file_name().and_then(|n| n.to_str()).and_then(|n| n.parse().ok()).unwrap();
        let nodes = vec![Node::looped("denoise", Arc::new(ScaledLoop(scale)), &[], &["latents"])];
        Ok(PipelineSpec::new("toy", vec![TaskType::T2v], nodes, &[], "latents")?)
    }
    fn hash(&self, path: &std::path::Path) -> Result<String> {
        Ok(path.display().to_string())
    }
}

#[test]
fn weight_updates_are_each_models_own() {
    let mut registry = prometheus_client::registry::Registry::default();
    let mut second = scaled_model("second", 10.0);
    second.weights = Some(fastvideo_engine::WeightUpdates { loader: Arc::new(ToyWeights), initial: "10".into() });
    let engine = Engine::start_with_models(
        scaled_model("first", 1.0),
        vec![second],
        None,
        EngineConfig::default(),
        Metrics::register(&mut registry),
    );
    let latents = |model: &str| {
        let mut r = req(&format!("{model}-{}", rand_id()), "p", 3);
        r.model = Some(model.into());
        r.outputs.return_latents = true;
        let out = rt().block_on(engine.submit(r).unwrap().wait()).unwrap();
        let Some(fastvideo_request::Artifact::Latents(l)) = out.artifacts.get("latents") else { panic!("no latents") };
        l.data[0]
    };
    rt().block_on(async {
        // The second model takes updates; the primary, which offers none, refuses naming itself.
        let info = engine.update_weights(Some("second"), "100".into(), None).await.unwrap();
        assert_eq!((info.epoch, info.hash.as_str()), (1, "100"));
        assert_eq!(engine.weights(Some("second")).await.unwrap().epoch, 1);
        let e = engine.weights(None).await.unwrap_err();
        assert!(matches!(&e, EngineError::NoWeightUpdates(m) if m == "first"), "{e}");
        assert_eq!(e.to_string(), "model `first` takes no weight updates");
        let e = engine.update_weights(Some("third"), "1".into(), None).await.unwrap_err();
        assert_eq!(e.field(), Some("model"), "{e}");
    });
    assert_eq!((latents("second"), latents("first")), (300.0, 3.0), "only the second model's weights changed");
}

fn rand_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
