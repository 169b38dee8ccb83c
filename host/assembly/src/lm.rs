//! The language model a deploy serves beside its video model (`[lm]`, `--lm DIR`): loaded through
//! the registry on the engine's device, as one more of the engine's models, with its chat codec
//! for the server's chat routes.

use std::sync::Arc;

use anyhow::{Context, Result};
use fastvideo_engine::EngineModel;
use fastvideo_models::{missing, Capability, ModelKind};
use fastvideo_request::chat::ChatCodec;
use tch::Device;

use crate::config::{LmConfig, ModelConfig};

/// A served language model: the engine's model and what the chat routes need.
pub struct ServedLm {
    pub model: EngineModel,
    pub id: String,
    pub codec: Arc<dyn ChatCodec>,
}

/// Loads `cfg.path` (none: no language model); errors name `--lm` and the folder.
pub fn language_model(
    cfg: &LmConfig,
    model: &ModelConfig,
    device: Device,
    metrics: &fastvideo_engine::Metrics,
) -> Result<Option<ServedLm>> {
    let Some(dir) = &cfg.path else { return Ok(None) };
    let ctx = || format!("lm.path (--lm) {}", dir.display());
    let family = fastvideo_models::registry().detect(dir, ModelKind::Language).with_context(ctx)?;
    let mut load = model.context(device, family).with_context(ctx)?;
    load.kv_cache_bytes = cfg.kv_cache.max(1);
    // The language model computes in its own dtype, whatever the video model's `dtype` says.
    load.numerics.dtype = fastvideo_torch::DtypeChoice::Auto;
    let lm = family.load(dir, &load).with_context(ctx)?;
    let id = crate::config::folder_name(dir);
    let chat = lm.chat().ok_or_else(|| missing(&id, family.name(), Capability::Chat)).with_context(ctx)?;
    metrics.watch_kv_pool(&chat.kv_pool);
    let check = chat.check.clone();
    let model = EngineModel {
        id: id.clone(),
        limits: lm.limits(),
        spec: lm.pipeline(fastvideo_pipeline::LoopPolicies::new(Arc::new(fastvideo_pipeline::ClassicCfg)))?,
        device,
        check: Box::new(move |r| check(r)),
        work: lm.work(),
        classify: |_| "pipeline_failed",
        weights: None,
        adapters: None,
        residency: None,
    };
    Ok(Some(ServedLm { model, id, codec: chat.codec }))
}

/// The chat a generation model serves beside its pipeline on the same weights (an omni
/// model's reasoner), as one more engine model named `<name>-reasoner`; `None` when it has
/// none.
pub fn beside(
    loaded: &dyn fastvideo_models::LoadedModel,
    name: &str,
    device: Device,
    metrics: &fastvideo_engine::Metrics,
) -> Option<ServedLm> {
    let chat = loaded.chat()?;
    let beside = chat.beside?;
    metrics.watch_kv_pool(&chat.kv_pool);
    let check = chat.check.clone();
    let id = format!("{name}-reasoner");
    let model = EngineModel {
        id: id.clone(),
        limits: beside.limits,
        spec: beside.spec,
        device,
        check: Box::new(move |r| check(r)),
        // One position a step, as a language model's.
        work: Arc::new(|_| 1),
        classify: |_| "pipeline_failed",
        weights: None,
        adapters: None,
        residency: None,
    };
    Some(ServedLm { model, id, codec: chat.codec })
}
