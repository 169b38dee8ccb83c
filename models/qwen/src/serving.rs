//! A language model as one of the engine's served models: its pipeline (tokenize the rendered
//! prompt, then the decode loop on a paged key/value pool), its request limits, and its chat
//! template and tokenizer as the server's [`ChatCodec`]. The engine then interleaves its token
//! steps with other models' denoise steps under one scheduler.

use std::sync::Arc;

use anyhow::Result;
use fastvideo_pipeline::token::{check_decode, ARDecodeLoop, KvBlockPool};
use fastvideo_pipeline::{Node, NodeCtx, PipelineSpec, Stage, Value, Values};
use fastvideo_request::chat::ChatCodec;
use fastvideo_request::{Defaults, ModelLimits, RequestError, ResolvedRequest, SamplerKind, TaskType};
use tch::Tensor;

use crate::chat::parse_messages;
use crate::language_model::PREFILL_CHUNK;
use crate::{ChatTokenizer, LanguageModel};

/// The decode node's name: a request's sampling parameters go in `node_params.ar_decode`.
pub const DECODE_NODE: &str = "ar_decode";
/// Key/value positions per pool block.
pub const BLOCK_SIZE: i64 = 16;

/// The request's prompt text (already through the chat template) into token ids.
struct Tokenize(Arc<ChatTokenizer>);

impl Stage for Tokenize {
    fn run(&self, ctx: &NodeCtx, values: &mut Values) -> Result<()> {
        let ids = self.0.encode(&ctx.request.prompt)?;
        anyhow::ensure!(!ids.is_empty(), "prompt: no tokens");
        values.insert("prompt_tokens", Value::Tensor(Tensor::from_slice(&ids)));
        Ok(())
    }
}

/// The pipeline the engine runs for this model's requests, its keys and values in a pool of
/// `kv_budget_bytes` (blocks of [`BLOCK_SIZE`] positions) shared by all of them.
pub fn chat_pipeline(lm: &LanguageModel, kv_budget_bytes: u64) -> Result<(PipelineSpec, Arc<KvBlockPool>)> {
    let model = lm.model.clone();
    let pool =
        Arc::new(KvBlockPool::with_budget(model.kv_shape(), BLOCK_SIZE, kv_budget_bytes, model.device(), model.kind()));
    let decode = ARDecodeLoop::new(model, "prompt_tokens", "tokens", PREFILL_CHUNK)
        .with_pool(pool.clone())
        .with_stop(lm.stop_tokens().to_vec());
    let nodes = vec![
        Node::stage("tokenize", Arc::new(Tokenize(lm.tokenizer.clone())), &[], &["prompt_tokens"]),
        Node::looped(DECODE_NODE, Arc::new(decode), &["prompt_tokens"], &["tokens"]),
    ];
    Ok((PipelineSpec::new("chat", vec![TaskType::Text], nodes, &[], "tokens")?, pool))
}

/// The chat face of `lm` on `pool`: its codec and an admission check that refuses a request
/// that could never fit the pool (naming max_tokens); `beside` when it is served next to a
/// generation model's pipeline.
pub fn chat_serving(
    lm: &LanguageModel,
    pool: &Arc<KvBlockPool>,
    beside: Option<fastvideo_family::ChatPipeline>,
) -> fastvideo_family::ChatServing {
    let capacity = pool.blocks() as i64 * pool.block_size();
    let tokenizer = lm.tokenizer.clone();
    let check = move |r: &ResolvedRequest| -> Result<(), RequestError> {
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
    fastvideo_family::ChatServing { codec: lm.tokenizer.clone(), kv_pool: pool.clone(), check: Arc::new(check), beside }
}

/// What a text request to this model may ask: `num_inference_steps` is the most tokens (prompt
/// prefill chunks and output), up to the model's context.
pub fn chat_limits(lm: &LanguageModel) -> ModelLimits {
    ModelLimits {
        family: "Qwen".into(),
        tasks: vec![TaskType::Text],
        image_roles: Vec::new(),
        // Text only: no frame or size rule, so a request giving either is refused.
        video: None,
        picture: None,
        audio: None,
        action: None,
        references: None,
        max_steps: lm.model.config.max_position_embeddings.max(1) as u32,
        defaults: Defaults {
            steps: 256,
            guidance_scale: 1.0,
            shift: 1.0,
            // Unread without picture and video limits.
            height: 0,
            width: 0,
            num_frames: 0,
            fps: 1,
            sampler: SamplerKind::Euler,
            negative_prompt: String::new(),
            timesteps: None,
            knobs: Default::default(),
        },
    }
}

impl ChatCodec for ChatTokenizer {
    fn prompt(&self, messages: &serde_json::Value) -> Result<String, RequestError> {
        let split = |e: anyhow::Error| {
            let text = format!("{e:#}");
            match text.split_once(": ") {
                Some((field, rule)) if field.starts_with("messages") => RequestError::new(field, rule),
                _ => RequestError::new("messages", text),
            }
        };
        let parsed = parse_messages(messages).map_err(split)?;
        self.render(&parsed, true).map_err(split)
    }

    fn count(&self, text: &str) -> Result<usize, RequestError> {
        self.encode(text).map(|ids| ids.len()).map_err(|e| RequestError::new("prompt", format!("{e:#}")))
    }

    fn decode(&self, ids: &[i64]) -> String {
        ChatTokenizer::decode(self, ids).unwrap_or_default()
    }

    fn template_source(&self) -> Option<&str> {
        self.template()
    }
}
