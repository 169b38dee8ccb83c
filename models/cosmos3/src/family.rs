//! Cosmos3 as one of the runtime's families ([`fastvideo_family`]): a diffusers
//! `Cosmos3OmniPipeline` folder served as a generation model (text to video, with sound when the
//! folder has a sound tokenizer, and text to image).

use std::any::Any;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use anyhow::Result;
use fastvideo_family::{ChatPipeline, ChatServing, Family, LoadContext, LoadSummary, LoadedModel, ModelKind};
use fastvideo_pipeline::token::KvBlockPool;
use fastvideo_pipeline::{LoopPolicies, PipelineSpec, WorkCount};
use fastvideo_qwen::LanguageModel;
use fastvideo_request::ModelLimits;

use crate::model::Cosmos3Model;

/// Cosmos3 omni.
pub struct Cosmos3;

/// The family entry the registry lists.
pub static COSMOS3: Cosmos3 = Cosmos3;

impl Family for Cosmos3 {
    fn name(&self) -> &'static str {
        "cosmos3"
    }

    fn architectures(&self) -> &'static [&'static str] {
        &["Cosmos3OmniPipeline"]
    }

    fn kind(&self) -> ModelKind {
        ModelKind::Generation
    }

    fn load(&self, dir: &Path, ctx: &LoadContext) -> Result<Box<dyn LoadedModel>> {
        let t0 = std::time::Instant::now();
        let n = &ctx.numerics;
        ctx.one_gpu_plain("Cosmos3")?;
        ctx.no_single_file("Cosmos3")?;
        let kind = n.dtype.resolve(ctx.device);
        let vae_kind = n.vae_dtype.resolve_or(ctx.device, fastvideo_wan::VAE_CUDA_DEFAULT);
        let model = Cosmos3Model::load(dir, ctx.device, kind, vae_kind)?;
        let kinds = (kind, None, Some(vae_kind));
        let summary = LoadSummary::plain("cosmos3", dir, ctx.device, kinds, t0.elapsed().as_secs_f64());
        let spec = Arc::new(crate::pipeline::spec(&model)?);
        // The reasoner on the same tensors (its pool is made when a server first serves chats).
        let reasoner = crate::reasoner::reasoner(&model.transformer, &model.prompts)?;
        Ok(Box::new(LoadedCosmos3 {
            model,
            spec,
            summary,
            reasoner,
            kv_bytes: ctx.kv_cache_bytes,
            chat: OnceLock::new(),
        }))
    }
}

/// A loaded Cosmos3 folder behind the seam.
pub struct LoadedCosmos3 {
    /// Its components.
    pub model: Cosmos3Model,
    spec: Arc<PipelineSpec>,
    summary: LoadSummary,
    /// The reasoner on the transformer's tensors (Nano/Super layouts).
    reasoner: Option<LanguageModel>,
    /// The key/value budget its chats may use at most.
    kv_bytes: u64,
    /// Its key/value pool and chat pipeline, made at the first `chat()`: a `generate` run
    /// never pays for them.
    chat: OnceLock<(Arc<KvBlockPool>, Arc<PipelineSpec>)>,
}

impl LoadedModel for LoadedCosmos3 {
    fn summary(&self) -> &LoadSummary {
        &self.summary
    }

    fn limits(&self) -> ModelLimits {
        self.model.limits()
    }

    /// The omni pipeline (its guidance is the pipeline's own: one scale for every modality),
    /// after the deploy's prompt stages (the rewrite of `prompt_extend`) when it has any.
    fn pipeline(&self, policies: LoopPolicies) -> Result<Arc<PipelineSpec>> {
        match policies.text_stages.is_empty() {
            true => Ok(self.spec.clone()),
            false => Ok(Arc::new(crate::pipeline::spec_with(&self.model, policies.text_stages)?)),
        }
    }

    /// The reasoner rewrites prompts for `prompt_extend`: both loops on the same weights, each
    /// step visible to the scheduler.
    fn rewriter(&self) -> Option<Arc<dyn fastvideo_family::PromptRewriter>> {
        let lm = self.reasoner.as_ref()?;
        let lm = LanguageModel::from_parts(lm.model.clone(), lm.tokenizer.clone(), lm.stop_tokens().to_vec());
        Some(Arc::new(fastvideo_qwen::PromptExtender { lm, system: Some(crate::reasoner::REWRITE_SYSTEM.into()) }))
    }

    /// Generation tokens a step: what one forward's cost grows with (the prompt is computed
    /// once per request, not per step).
    fn work(&self) -> WorkCount {
        let geometry = self.model.geometry();
        let p = self.model.transformer.config().latent_patch_size;
        Arc::new(move |r| {
            let [_, t, h, w] = geometry.vision(r);
            let vision = t * ((h + p - 1) / p) * ((w + p - 1) / p);
            (vision + geometry.sound_frames(r).unwrap_or(0)) as u64
        })
    }

    fn resident_bytes(&self) -> u64 {
        // One copy for both loops: the text pathway counted once, plus the reasoner's head.
        let (und, gen) = self.model.transformer.bytes();
        und + gen + self.model.transformer.head_bytes()
    }

    /// The reasoner's chats, beside the generation pipeline on the same weights.
    fn chat(&self) -> Option<ChatServing> {
        let lm = self.reasoner.as_ref()?;
        let (pool, spec) = self.chat.get_or_init(|| {
            // At most four chats of the whole context; the deploy's budget caps it.
            let shape = lm.model.kv_shape();
            let per_position = 2 * shape.layers as u64 * (shape.kv_heads * shape.head_dim) as u64 * 2;
            let bytes = self.kv_bytes.min(per_position * crate::reasoner::MAX_POSITIONS as u64 * 4);
            let (spec, pool) = fastvideo_qwen::serving::chat_pipeline(lm, bytes).expect("the chat graph is valid");
            (pool, Arc::new(spec))
        });
        let beside = ChatPipeline { spec: spec.clone(), limits: fastvideo_qwen::serving::chat_limits(lm) };
        Some(fastvideo_qwen::serving::chat_serving(lm, pool, Some(beside)))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
