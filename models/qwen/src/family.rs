//! Qwen as one of the runtime's families ([`fastvideo_family`]): a transformers-layout Qwen3 or
//! Qwen2.5 folder served as a language model, its chat template and tokenizer as the chat
//! routes' codec, its decode loop on a paged key/value pool.

use std::any::Any;
use std::path::Path;
use std::sync::Arc;

use anyhow::Result;
use fastvideo_family::{ChatServing, Family, LoadContext, LoadSummary, LoadedModel, ModelKind, PromptRewriter};
use fastvideo_pipeline::token::KvBlockPool;
use fastvideo_pipeline::{LoopPolicies, PipelineSpec, WorkCount};
use fastvideo_request::ModelLimits;
use fastvideo_torch::Precision;
use tch::Kind;

use crate::serving::{chat_limits, chat_pipeline};
use crate::LanguageModel;

/// Qwen3 and Qwen2.5 causal language models.
pub struct Qwen;

/// The family entry the registry lists.
pub static QWEN: Qwen = Qwen;

impl Family for Qwen {
    fn name(&self) -> &'static str {
        "qwen"
    }

    fn architectures(&self) -> &'static [&'static str] {
        // The model classes, and the model types of folders that name no class.
        &["Qwen3ForCausalLM", "Qwen2ForCausalLM", "qwen3", "qwen2"]
    }

    fn kind(&self) -> ModelKind {
        ModelKind::Language
    }

    fn rewriter(&self, dir: &Path, device: tch::Device) -> Result<Option<Arc<dyn PromptRewriter>>> {
        let kind = if device.is_cuda() { Kind::BFloat16 } else { Kind::Float };
        Ok(Some(Arc::new(crate::PromptExtender::load(dir, device, kind)?)))
    }

    fn load(&self, dir: &Path, ctx: &LoadContext) -> Result<Box<dyn LoadedModel>> {
        let t0 = std::time::Instant::now();
        ctx.no_device_budget("The Qwen3 language model")?;
        // `auto` (what a served `[lm]` always asks): bf16 on CUDA, float32 elsewhere.
        let kind = ctx.numerics.dtype.resolve(ctx.device);
        let lm = LanguageModel::load(dir, ctx.device, kind)?;
        let (spec, pool) = chat_pipeline(&lm, ctx.kv_cache_bytes)?;
        let summary = LoadSummary {
            family: "qwen",
            dir: dir.to_path_buf(),
            device: ctx.device,
            // What it computes in: the language model takes no lossy path and no preset's dtype.
            precision: if kind == Kind::Float { Precision::Exact } else { Precision::Bf16 },
            fp8_linears: false,
            int8_attention: None,
            dtype: kind,
            text_encoder_dtype: None,
            vae_dtype: None,
            tiny_decoder: false,
            parallel: None,
            seconds: t0.elapsed().as_secs_f64(),
            note: None,
            quantized_weights: None,
            device_budget: None,
        };
        Ok(Box::new(LoadedQwen { lm, spec: Arc::new(spec), pool, summary }))
    }
}

/// A loaded language model behind the seam.
pub struct LoadedQwen {
    /// The model itself.
    pub lm: LanguageModel,
    spec: Arc<PipelineSpec>,
    pool: Arc<KvBlockPool>,
    summary: LoadSummary,
}

impl LoadedModel for LoadedQwen {
    fn summary(&self) -> &LoadSummary {
        &self.summary
    }

    fn limits(&self) -> ModelLimits {
        chat_limits(&self.lm)
    }

    /// The chat pipeline on the pool made at load (deploy policies do not apply to token loops).
    fn pipeline(&self, _policies: LoopPolicies) -> Result<Arc<PipelineSpec>> {
        Ok(self.spec.clone())
    }

    /// One position a step: a decode step runs one new token per request (`num_inference_steps`
    /// counts the prefill chunks among the steps too), so every request shares one cost key.
    fn work(&self) -> WorkCount {
        Arc::new(|_| 1)
    }

    fn chat(&self) -> Option<ChatServing> {
        Some(crate::serving::chat_serving(&self.lm, &self.pool, None))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
