//! [`build_engine`]: a [`ServeConfig`] made into a running engine, its metrics registry and a
//! description of what was built. `fastvideo serve` and the Dynamo worker both start their
//! engine here, so the same config gives the same engine whichever front end reads it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use fastvideo_engine::{CostConfig, Engine, EngineConfig, Metrics};
use fastvideo_models::LoadedModel;
use fastvideo_plugin_host::Deployment;
use prometheus_client::registry::Registry;
use serde::Serialize;
use tch::Device;

use crate::config::ServeConfig;
use crate::model::ModelLocation;
use crate::served::{ServedModel, Slot};

/// A started engine and what a front end needs beside it.
pub struct Assembly {
    /// The engine, started.
    pub engine: Engine,
    /// Every metric the engine publishes is registered here; servers add theirs.
    pub registry: Registry,
    /// The engine's metric handles.
    pub metrics: Metrics,
    /// The primary model's folder and name.
    pub model: ModelLocation,
    /// The device the primary model runs on (rank 0 when split).
    pub device: Device,
    /// The loaded deploy config, if one was given.
    pub deploy: Option<Arc<Deployment>>,
    /// What was built (`serve --print-engine` prints it).
    pub description: EngineDescription,
    /// The language model served beside the video model: its id and chat codec.
    pub chat: Option<(String, Arc<dyn fastvideo_request::chat::ChatCodec>)>,
    /// What to say about a request's prompt, per served video model id.
    pub prompt_warnings: BTreeMap<String, crate::PromptWarnings>,
    /// What `/v1/models` says about each served model's numerics, per id.
    pub model_info: BTreeMap<String, serde_json::Value>,
}

/// What an engine was built with, as JSON-friendly data: two front ends that print the same
/// description built the same engine.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EngineDescription {
    /// The name clients ask for.
    pub model: String,
    /// The model's folder.
    pub model_dir: PathBuf,
    /// The device, as libtorch prints it (`Cpu`, `Cuda(0)`).
    pub device: String,
    /// The precision preset served: exact, bf16 or fast.
    pub precision: String,
    /// FP8 linears in the inner transformer blocks (`fp8_linears`).
    pub fp8_linears: bool,
    /// 8-bit self-attention with e4m3 P·V (`int8_attention`).
    pub int8_attention: bool,
    /// 8-bit self-attention with f16 P·V (`int8_qk_attention`).
    pub int8_qk_attention: bool,
    /// The transformer's dtype.
    pub transformer_dtype: String,
    /// The text encoder's dtype.
    pub text_encoder_dtype: String,
    /// The VAE's dtype.
    pub vae_dtype: String,
    /// Whether the fused CUDA kernels run.
    pub kernels: bool,
    /// `cfg`/`sp` degrees and devices when split over GPUs.
    pub parallel: Option<String>,
    /// What requests may ask of the primary model.
    pub limits: fastvideo_request::ModelLimits,
    /// The deploy file and the blake3 of its bytes (its limits and plugin defaults are in it).
    pub deploy: Option<(PathBuf, String)>,
    /// The plugins bound into the pipeline, one line each.
    pub plugins: Vec<String>,
    /// Whether `/v1/weights` updates are taken.
    pub weight_updates: bool,
    /// The world model's folder, when it serves sessions.
    pub world: Option<PathBuf>,
    /// The scheduler's parameters.
    pub scheduler: SchedulerDescription,
    /// Metrics fed by hooks outside the engine (the embedding cache, plugin time).
    pub metric_hooks: Vec<&'static str>,
}

/// The engine's scheduling parameters after device-derived defaults were filled in.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SchedulerDescription {
    /// How the next unit is picked.
    pub policy: fastvideo_engine::Policy,
    /// Requests holding state at once.
    pub max_active: usize,
    /// Requests admitted (queued or running) at once.
    pub max_queue: usize,
    /// Memory the active requests may hold together.
    pub memory_bytes: u64,
    /// Most requests stepped by one batched call.
    pub max_batch: usize,
    /// Most tokens one packed step holds.
    pub max_batch_tokens: u64,
    /// Requests predicted to take longer are refused.
    pub max_request_seconds: Option<f64>,
    /// `None`: off.
    pub max_stretch: Option<f64>,
    /// The executor's share for overdue jobs.
    pub overdue_share: f64,
    /// Live world-model sessions at once.
    pub max_sessions: usize,
    /// Seconds an untouched session stays open.
    pub session_idle_seconds: u64,
    /// The executor's share waiting jobs keep against sessions.
    pub job_floor: f64,
    /// The cost model's prior: step seconds per thousand token-forwards (the model's unit of
    /// work) before anything was measured.
    pub cost_prior_step_seconds_per_ktoken_forward: f64,
}

/// The deploy config `cfg.deploy` names, loaded (plugins compiled, hashes checked).
pub fn load_deploy(cfg: &ServeConfig) -> Result<Option<Arc<Deployment>>> {
    deploy_at(cfg.deploy.as_deref())
}

/// The deploy config at `path`, if any, loaded; errors name `--deploy` and the file.
pub fn deploy_at(path: Option<&std::path::Path>) -> Result<Option<Arc<Deployment>>> {
    path.map(|p| Deployment::load(p).map(Arc::new).with_context(|| format!("--deploy {}", p.display()))).transpose()
}

/// The engine's parameters: the config's, with the device's defaults where it left them open
/// (memory: 90 % of the CUDA memory free now, or a quarter of the model's device budget when
/// that is less, else 8 GiB; batching: 8 on CUDA, 1 on CPU).
pub fn engine_config(cfg: &ServeConfig, device: Device) -> EngineConfig {
    let s = &cfg.scheduler;
    let memory_bytes = match (s.memory_mib, device) {
        (Some(mib), _) => mib << 20,
        (None, Device::Cuda(i)) => {
            let free = fastvideo_kernels::cuda::memory_free(i).map_or(8 << 30, |free| free / 10 * 9);
            // Under a device budget the requests share what the weights leave of it: the
            // quarter the plan keeps for activations (fastvideo_wan::device_budget).
            cfg.model.max_device_memory.map_or(free, |b| free.min(b / 4))
        }
        (None, _) => 8 << 30,
    };
    EngineConfig {
        policy: s.policy,
        max_active: s.max_active,
        max_queue: s.max_queue,
        memory_bytes,
        max_request_seconds: s.max_request_seconds,
        max_batch: s.max_batch.unwrap_or(if device.is_cuda() { 8 } else { 1 }),
        max_batch_tokens: s.max_batch_tokens.unwrap_or(fastvideo_engine::DEFAULT_BATCH_TOKENS),
        cost: CostConfig::for_device(device.is_cuda()),
        max_sessions: cfg.world.max_sessions.max(1),
        session_idle: Duration::from_secs(cfg.world.idle_seconds.max(1)),
        job_floor: cfg.world.job_floor,
        max_stretch: if s.max_stretch == 0.0 { f64::INFINITY } else { s.max_stretch },
        overdue_share: s.overdue_share,
        max_resident_models: s.max_resident_models,
        ..Default::default()
    }
}

/// Loads the model (and the world model, when sessions are on), binds the deploy's plugins and
/// starts the engine. Nothing is started when a step fails; errors name the flag or field.
pub fn build_engine(cfg: &ServeConfig) -> Result<Assembly> {
    cfg.validate()?;
    build_engine_with(cfg, load_deploy(cfg)?)
}

/// [`build_engine`] with `cfg` validated and `cfg.deploy` already loaded as `deploy`.
pub(crate) fn build_engine_with(cfg: &ServeConfig, deploy: Option<Arc<Deployment>>) -> Result<Assembly> {
    let device = cfg.model.torch_device()?;
    let location = cfg.model.locate()?;
    if let Some(d) = &deploy {
        check_adapter_models(d, &location.name, &cfg.models)?;
    }
    let primary = Slot { name: &location.name, dir: &location.dir, primary: true, pin: true, lazy: false };
    let primary = crate::served::served(cfg, deploy.as_ref(), primary, device)?;
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let mut engine_cfg = engine_config(cfg, device);
    let world = crate::world::sessions(&cfg.world, &cfg.model, deploy.as_ref(), &cfg.adapters, device)?;
    let metric_hooks = observe(primary.loaded.as_ref(), deploy.as_deref(), &metrics);
    let description = EngineDescription {
        metric_hooks,
        ..describe(cfg, &location, &primary, &engine_cfg, world.as_ref().map(|w| w.dir.clone()))
    };
    // A separate language model (--lm), else the reasoner of an omni model on its own weights.
    let lm = match crate::lm::language_model(&cfg.lm, &cfg.model, device, &metrics)? {
        Some(lm) => Some(lm),
        None => crate::lm::beside(primary.loaded.as_ref(), &location.name, device, &metrics),
    };
    let chat = lm.as_ref().map(|l| (l.id.clone(), l.codec.clone()));
    let mut prompt_warnings = BTreeMap::from([(location.name.clone(), primary.warnings)]);
    let mut model_info = BTreeMap::from([(location.name.clone(), crate::served::model_info(primary.loaded.as_ref()))]);
    let mut extra = Vec::new();
    let mut budget = WeightBudget::default();
    budget.add(&location.name, primary.loaded.resident_bytes(), None, true);
    for m in &cfg.models {
        if m.name == location.name || chat.as_ref().is_some_and(|(id, _)| *id == m.name) {
            anyhow::bail!("models: `{}` is already the name of another served model", m.name);
        }
        let slot = Slot { name: &m.name, dir: &m.path, primary: false, pin: m.pin, lazy: m.lazy };
        let served = crate::served::served(cfg, deploy.as_ref(), slot, device)?;
        prompt_warnings.insert(m.name.clone(), served.warnings);
        model_info.insert(m.name.clone(), crate::served::model_info(served.loaded.as_ref()));
        let bytes = served.loaded.resident_bytes();
        budget.add(&m.name, bytes, served.engine.residency.clone(), !m.lazy);
        extra.push(served.engine);
    }
    if let Some(w) = &world {
        let id = w.sessions.id();
        if id == location.name || cfg.models.iter().any(|m| m.name == id) || chat.as_ref().is_some_and(|c| c.0 == id) {
            anyhow::bail!("world: the world model's id `{id}` is already the name of another served model");
        }
        budget.add(id, w.bytes, w.sessions.residency(), true);
    }
    engine_cfg.max_resident_bytes = budget.settle(cfg.scheduler.weight_budget_mib)?;
    extra.extend(lm.into_iter().map(|l| l.model));
    let engine =
        Engine::start_with_models(primary.engine, extra, world.map(|w| w.sessions), engine_cfg, metrics.clone());
    Ok(Assembly {
        engine,
        registry,
        metrics,
        model: location,
        device,
        deploy,
        description,
        chat,
        prompt_warnings,
        model_info,
    })
}

/// Every `[[adapters]]` entry's `model` names a served video model.
fn check_adapter_models(deploy: &Deployment, primary: &str, models: &[crate::config::NamedModel]) -> Result<()> {
    for (model, sources) in &deploy.model_adapters {
        if model != primary && !models.iter().any(|m| m.name == *model) {
            let served: Vec<String> = std::iter::once(primary)
                .chain(models.iter().map(|m| m.name.as_str()))
                .map(|n| format!("`{n}`"))
                .collect();
            anyhow::bail!(
                "[[adapters]] `{}`: model = \"{model}\" is not served here (served: {})",
                sources[0].name,
                served.join(", ")
            );
        }
    }
    Ok(())
}

/// A model that may sleep, as the weight budget sees it.
struct Sleeper {
    name: String,
    bytes: u64,
    residency: Arc<dyn fastvideo_engine::Residency>,
    /// Read at start when it fits (not asked to be lazy).
    eager: bool,
}

/// The served models' transformer weights against `scheduler.weight_budget_mib`: those that
/// never leave the device take their part first, and every model that can sleep must fit
/// beside them, else the server refuses to start (it could never run that model's work).
#[derive(Default)]
struct WeightBudget {
    fixed: Vec<(String, u64)>,
    sleepers: Vec<Sleeper>,
}

impl WeightBudget {
    /// A served model: `bytes` on the device while resident, `residency` when it may sleep,
    /// `eager` when it should be read at start if it fits.
    fn add(&mut self, name: &str, bytes: u64, residency: Option<Arc<dyn fastvideo_engine::Residency>>, eager: bool) {
        match residency {
            Some(r) => self.sleepers.push(Sleeper { name: name.to_string(), bytes: r.bytes(), residency: r, eager }),
            None => self.fixed.push((name.to_string(), bytes)),
        }
    }

    /// Checks the budget of `mib` against the models, reads the eager models that were loaded
    /// lazily while they fit (in the order they were declared), and answers the bytes left for
    /// the models that can sleep.
    fn settle(&self, mib: Option<u64>) -> Result<Option<u64>> {
        let Some(mib) = mib else { return Ok(None) };
        let budget = mib
            .checked_mul(1 << 20)
            .ok_or_else(|| anyhow::anyhow!("scheduler.weight_budget_mib (--weight-budget-mib) {mib} is too large"))?;
        let fixed = self.fixed.iter().map(|f| f.1).sum::<u64>();
        let mb = |b: u64| b.div_ceil(1 << 20);
        let list = |v: &[(String, u64)]| v.iter().map(|(n, b)| format!("`{n}` {} MiB", mb(*b))).collect::<Vec<_>>();
        if fixed > budget {
            anyhow::bail!(
                "scheduler.weight_budget_mib (--weight-budget-mib) {mib}: the weights that never sleep take {} MiB ({})",
                mb(fixed),
                list(&self.fixed).join(", ")
            );
        }
        if let Some(s) = self.sleepers.iter().find(|s| fixed + s.bytes > budget) {
            anyhow::bail!(
                "scheduler.weight_budget_mib (--weight-budget-mib) {mib}: `{}` needs {} MiB beside the weights that \
                 never sleep ({}), {} MiB in all",
                s.name,
                mb(s.bytes),
                list(&self.fixed).join(", "),
                mb(fixed + s.bytes)
            );
        }
        let mut used: u64 = self.sleepers.iter().filter(|s| s.residency.is_resident()).map(|s| s.bytes).sum();
        for s in self.sleepers.iter().filter(|s| s.eager && !s.residency.is_resident()) {
            if fixed + used + s.bytes <= budget {
                s.residency.wake().with_context(|| format!("models `{}`: reading its weights", s.name))?;
                used += s.bytes;
            }
        }
        Ok(Some(budget - fixed))
    }
}

/// Feeds the embedding-cache and plugin-time metrics from their sources; names what it hooked.
fn observe(model: &dyn LoadedModel, deploy: Option<&Deployment>, metrics: &Metrics) -> Vec<&'static str> {
    let mut hooks = Vec::new();
    if let Some(cache) = model.text_cache() {
        let (hits, misses) = (metrics.embedding_cache_hits.clone(), metrics.embedding_cache_misses.clone());
        cache.observe(Box::new(move |hit| {
            if hit { &hits } else { &misses }.inc();
        }));
        hooks.push("embedding_cache");
    }
    if let Some(d) = deploy {
        let plugin_seconds = metrics.plugin_seconds.clone();
        d.runtime.observe_calls(Box::new(move |s| {
            plugin_seconds.inc_by(s);
        }));
        hooks.push("plugin_seconds");
    }
    hooks
}

fn describe(
    cfg: &ServeConfig,
    location: &ModelLocation,
    primary: &ServedModel,
    e: &EngineConfig,
    world: Option<PathBuf>,
) -> EngineDescription {
    let r = primary.loaded.summary();
    let kind = |k: Option<tch::Kind>| k.map_or("none", fastvideo_torch::kind_name).to_string();
    EngineDescription {
        model: location.name.clone(),
        model_dir: location.dir.canonicalize().unwrap_or_else(|_| location.dir.clone()),
        device: format!("{:?}", r.device),
        precision: r.precision.to_string(),
        fp8_linears: r.fp8_linears,
        int8_attention: r.int8_attention == Some(fastvideo_torch::Int8Attention::Fp8Pv),
        int8_qk_attention: r.int8_attention == Some(fastvideo_torch::Int8Attention::F16Pv),
        transformer_dtype: fastvideo_torch::kind_name(r.dtype).into(),
        text_encoder_dtype: kind(r.text_encoder_dtype),
        vae_dtype: kind(r.vae_dtype),
        kernels: fastvideo_kernels::enabled(),
        parallel: r.parallel.clone(),
        limits: primary.engine.limits.clone(),
        deploy: cfg.deploy.as_ref().map(|p| {
            let hash = std::fs::read(p).map(|b| blake3::hash(&b).to_hex().to_string()).unwrap_or_default();
            (p.canonicalize().unwrap_or_else(|_| p.clone()), hash)
        }),
        plugins: primary.binding.describe(),
        weight_updates: primary.engine.weights.is_some(),
        world,
        scheduler: SchedulerDescription {
            policy: e.policy,
            max_active: e.max_active,
            max_queue: e.max_queue,
            memory_bytes: e.memory_bytes,
            max_batch: e.max_batch,
            max_batch_tokens: e.max_batch_tokens,
            max_request_seconds: e.max_request_seconds,
            max_stretch: e.max_stretch.is_finite().then_some(e.max_stretch),
            overdue_share: e.overdue_share,
            max_sessions: e.max_sessions,
            session_idle_seconds: e.session_idle.as_secs(),
            job_floor: e.job_floor,
            cost_prior_step_seconds_per_ktoken_forward: e.cost.prior_step_seconds_per_ktoken_forward,
        },
        metric_hooks: Vec::new(),
    }
}
