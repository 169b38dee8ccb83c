//! One served generation model, whatever its family and whatever slot it fills: loaded through
//! the registry, its plugins bound by its name, its capabilities (adapters, weight updates,
//! residency) taken from what its family offers and what the deploy enables for it.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use fastvideo_engine::{EngineModel, WeightLoader, WeightUpdates};
use fastvideo_models::{LoadedModel, ModelKind};
use fastvideo_pipeline::{AdapterCache, AdapterSource, PipelineSpec};
use fastvideo_plugin_host::{Binding, Deployment};
use tch::Device;

use crate::config::ServeConfig;
use crate::precision::precision_check;

/// How a model is served.
pub(crate) struct Slot<'a> {
    /// What requests call it.
    pub name: &'a str,
    pub dir: &'a Path,
    /// Requests naming no model get it; it takes the deploy's `[[adapters]]` without `model`.
    pub primary: bool,
    /// Never put to sleep; a pinned model takes weight updates (a model that may sleep does
    /// not: its weights leave the device and come back as they were loaded).
    pub pin: bool,
    /// Starts asleep: its large weights are read at the first wake.
    pub lazy: bool,
}

/// A served model with what the assembly needs beside its engine entry.
pub(crate) struct ServedModel {
    pub engine: EngineModel,
    pub loaded: Box<dyn LoadedModel>,
    pub binding: Binding,
    pub warnings: crate::PromptWarnings,
}

/// Loads and binds one generation model for the engine.
pub(crate) fn served(
    cfg: &ServeConfig,
    deploy: Option<&Arc<Deployment>>,
    slot: Slot,
    device: Device,
) -> Result<ServedModel> {
    let Slot { name, dir, primary, pin, lazy: lazy_asked } = slot;
    let what = || if primary { format!("--model {}", dir.display()) } else { format!("models `{name}`") };
    // Adapters merge into the weights in place: a model with some stays on the device, read at
    // start.
    let sources = deploy.map(|d| d.adapters_for(name, primary)).unwrap_or_default();
    if lazy_asked && !sources.is_empty() {
        anyhow::bail!(
            "models `{name}`: lazy (--lazy-model) and [[adapters]] with model = \"{name}\" exclude each other"
        );
    }
    // Under a weight budget, models that may sleep load lazily and the budget decides which are
    // read at start (`WeightBudget::settle`): loading them all first could exceed the device.
    let lazy = lazy_asked || (!pin && sources.is_empty() && cfg.scheduler.weight_budget_mib.is_some());
    // Only the primary is split over `--gpus`; the models beside it run on its first device.
    let model_config = match primary {
        true => cfg.model.clone(),
        false => crate::ModelConfig { gpus: 1, parallel: None, ..cfg.model.clone() },
    };
    let loaded = model_config.load_model(dir, ModelKind::Generation, device, lazy).with_context(what)?;
    if lazy_asked && loaded.deferred_bytes().is_none() {
        anyhow::bail!("models `{name}`: lazy (--lazy-model) needs a model with one transformer and no FP8 linears");
    }
    let binding = Binding::of(deploy, name);
    // A named or bundled extender, else the model's own reasoner (omni models).
    let extender = match cfg.model.load_extender(dir, device).with_context(what)? {
        Some(e) => Some(e),
        None => loaded.rewriter(),
    };
    let policies = crate::extend::with_extender(binding.policies.clone(), extender.as_deref());
    let spec = loaded.pipeline(policies.clone())?;
    let adapters = adapter_cache(&spec, &sources, &cfg.adapters)?;
    // A pinned model takes weight updates; one that is not may sleep unless adapters keep it.
    let weights = match pin {
        true => loaded.weight_updates(policies).map(|w| WeightUpdates {
            loader: Arc::new(SameFamily { inner: w.loader, family: loaded.summary().family }),
            initial: w.initial,
        }),
        false => None,
    };
    let stays = pin || adapters.is_some();
    let residency = match stays {
        true => None,
        false => loaded.residency(cfg.scheduler.sleep_to).with_context(|| {
            let tier = if cfg.scheduler.sleep_to == crate::SleepTier::Disk { "disk" } else { "host" };
            format!("models `{name}`: scheduler.sleep_to = {tier} (--sleep-to)")
        })?,
    };
    let s = loaded.summary();
    let precision = precision_check(s.precision, s.lossy_paths());
    let plugins = binding.request_check();
    let extend = crate::extend::extend_check(extender.clone(), name);
    let warnings = crate::extend::prompt_warnings(loaded.as_ref(), extender.is_some());
    let nodes = Arc::clone(&spec);
    let engine = EngineModel {
        id: name.to_string(),
        limits: loaded.limits(),
        spec,
        device,
        check: Box::new(move |r| {
            precision(r).and_then(|()| extend(r)).and_then(|()| nodes.check_node_params(r)).and_then(|()| plugins(r))
        }),
        work: loaded.work(),
        classify: Binding::classify_failure,
        weights,
        adapters,
        residency,
    };
    Ok(ServedModel { engine, loaded, binding, warnings })
}

/// What `/v1/models` says about a model's numerics: the precision preset served, the lossy
/// paths on top of it, and the checkpoint's own quantized format (GGUF, FP8) when it has one.
pub fn model_info(loaded: &dyn LoadedModel) -> serde_json::Value {
    let s = loaded.summary();
    let mut v = serde_json::json!({"precision": s.precision.to_string(), "lossy_paths": s.lossy_paths()});
    if let Some(q) = &s.quantized_weights {
        v["quantized_weights"] = q.clone().into();
    }
    if let Some(b) = &s.device_budget {
        v["device_budget"] = b.clone().into();
    }
    v
}

/// Weight updates that refuse a model folder of another family before reading any weights (the
/// family's own loader then names the file and tensor of whatever else is wrong).
struct SameFamily {
    inner: Arc<dyn WeightLoader>,
    family: &'static str,
}

impl SameFamily {
    fn check(&self, path: &Path) -> Result<()> {
        if !path.join("model_index.json").is_file() {
            return Ok(());
        }
        let arch = fastvideo_models::architecture_of(path)?;
        let family = fastvideo_models::registry().families().iter().find(|f| f.name() == self.family);
        if !family.is_some_and(|f| f.architectures().contains(&arch.name.as_str())) {
            anyhow::bail!(
                "{}: architecture `{}` ({}) is not this model's family ({}); give weights of the same model",
                path.display(),
                arch.name,
                arch.file,
                self.family
            );
        }
        Ok(())
    }
}

impl WeightLoader for SameFamily {
    fn load(&self, path: &Path) -> Result<PipelineSpec> {
        self.check(path)?;
        self.inner.load(path)
    }

    fn hash(&self, path: &Path) -> Result<String> {
        self.inner.hash(path)
    }
}

/// The adapter cache over `sources` for `spec`'s model, or none when no adapter is enabled. Every
/// file is checked against the model's modules here, so a wrong one refuses to start.
fn adapter_cache(
    spec: &PipelineSpec,
    sources: &[AdapterSource],
    cfg: &crate::config::AdapterConfig,
) -> Result<Option<Arc<AdapterCache>>> {
    if sources.is_empty() {
        return Ok(None);
    }
    let Some(target) = &spec.adapters else {
        anyhow::bail!(
            "[[adapters]]: this model takes no LoRA adapters (its family has none, or its transformer runs parallel \
             over --gpus)"
        );
    };
    if cfg.max_per_request == 0 {
        anyhow::bail!("adapters.max_per_request (--max-loras-per-request) must be at least 1");
    }
    let cache = AdapterCache::new(Arc::clone(target), sources.to_vec(), cfg.cache_mib << 20, cfg.max_per_request)?;
    Ok(Some(Arc::new(cache)))
}
