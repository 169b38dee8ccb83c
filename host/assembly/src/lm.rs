//! The language model a deploy serves beside its video model (`[lm]`, `--lm DIR`): loaded on the
//! engine's device, as one more of the engine's models, with its chat template and tokenizer for
//! the server's chat routes.

use std::sync::Arc;

use anyhow::{Context, Result};
use fastvideo_engine::EngineModel;
use fastvideo_pipeline::token::DecodeParams;
use fastvideo_qwen::serving::{chat_limits, chat_pipeline, DECODE_NODE};
use fastvideo_qwen::LanguageModel;
use fastvideo_request::chat::ChatCodec;
use fastvideo_request::RequestError;
use tch::{Device, Kind};

use crate::config::LmConfig;

/// A served language model: the engine's model and what the chat routes need.
pub struct ServedLm {
    pub model: EngineModel,
    pub id: String,
    pub codec: Arc<dyn ChatCodec>,
}

/// Admission's check of a request's sampling parameters (`node_params.ar_decode`), so a bad
/// one is a 400 naming the field rather than a failure when its decode starts.
fn check_decode(r: &fastvideo_request::ResolvedRequest) -> Result<(), RequestError> {
    let Some(v) = r.node_params.get(DECODE_NODE) else { return Ok(()) };
    let p: DecodeParams = serde_json::from_value(v.clone())
        .map_err(|e| RequestError::new(format!("node_params.{DECODE_NODE}"), e.to_string()))?;
    if p.max_tokens == 0 {
        return Err(RequestError::new("max_tokens", "at least 1"));
    }
    p.sampling().validate().map_err(|(field, why)| RequestError::new(field, why))
}

/// Loads `cfg.path` (none: no language model); errors name `--lm` and the folder.
pub fn language_model(cfg: &LmConfig, device: Device) -> Result<Option<ServedLm>> {
    let Some(dir) = &cfg.path else { return Ok(None) };
    let kind = if device.is_cuda() { Kind::BFloat16 } else { Kind::Float };
    let ctx = || format!("lm.path (--lm) {}", dir.display());
    let lm = LanguageModel::load(dir, device, kind).with_context(ctx)?;
    let id = dir
        .canonicalize()
        .unwrap_or_else(|_| dir.clone())
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "lm".into());
    let (spec, _pool) = chat_pipeline(&lm, cfg.kv_cache.max(1 << 20)).with_context(ctx)?;
    let model = EngineModel {
        id: id.clone(),
        limits: chat_limits(&lm),
        spec: Arc::new(spec),
        device,
        check: Box::new(check_decode),
        classify: |_| "pipeline_failed",
        weights: None,
        adapters: None,
    };
    Ok(Some(ServedLm { model, id, codec: lm.tokenizer.clone() }))
}
