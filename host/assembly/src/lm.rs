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

/// Admission's check of a request's sampling parameters (`node_params.<node>`, the decode
/// node's), so a bad one is a 400 naming the field rather than a failure when its decode starts.
/// `prefix` goes before the field names (empty for chat, whose fields are OpenAI's).
pub(crate) fn check_decode(
    r: &fastvideo_request::ResolvedRequest,
    node: &str,
    prefix: &str,
) -> Result<(), RequestError> {
    let Some(v) = r.node_params.get(node) else { return Ok(()) };
    let p: DecodeParams = serde_json::from_value(v.clone())
        .map_err(|e| RequestError::new(format!("node_params.{node}"), e.to_string()))?;
    if p.max_tokens == 0 {
        return Err(RequestError::new(format!("{prefix}max_tokens"), "at least 1"));
    }
    p.sampling().validate().map_err(|(field, why)| RequestError::new(format!("{prefix}{field}"), why))
}

/// Loads `cfg.path` (none: no language model); errors name `--lm` and the folder.
pub fn language_model(cfg: &LmConfig, device: Device, metrics: &fastvideo_engine::Metrics) -> Result<Option<ServedLm>> {
    let Some(dir) = &cfg.path else { return Ok(None) };
    let kind = if device.is_cuda() { Kind::BFloat16 } else { Kind::Float };
    let ctx = || format!("lm.path (--lm) {}", dir.display());
    let lm = LanguageModel::load(dir, device, kind).with_context(ctx)?;
    let id = crate::config::folder_name(dir);
    let (spec, pool) = chat_pipeline(&lm, cfg.kv_cache.max(1)).with_context(ctx)?;
    metrics.watch_kv_pool(&pool);
    // A request that could never fit the pool is refused at admission, naming max_tokens.
    let capacity = pool.blocks() as i64 * pool.block_size();
    let tokenizer = lm.tokenizer.clone();
    let check = move |r: &fastvideo_request::ResolvedRequest| -> Result<(), RequestError> {
        check_decode(r, DECODE_NODE, "")?;
        let max_tokens = r.node_params.get(DECODE_NODE).and_then(|v| v.get("max_tokens")).and_then(|v| v.as_i64());
        let prompt = tokenizer.encode(&r.prompt).map(|ids| ids.len() as i64).unwrap_or(0);
        let need = prompt + max_tokens.unwrap_or(256);
        if need > capacity {
            return Err(RequestError::new(
                "max_tokens",
                format!(
                    "{need} positions (prompt and max_tokens) exceed the key/value cache's {capacity} (--lm-kv-cache)"
                ),
            ));
        }
        Ok(())
    };
    let model = EngineModel {
        id: id.clone(),
        limits: chat_limits(&lm),
        spec: Arc::new(spec),
        device,
        check: Box::new(check),
        classify: |_| "pipeline_failed",
        weights: None,
        adapters: None,
        residency: None,
    };
    Ok(Some(ServedLm { model, id, codec: lm.tokenizer.clone() }))
}
