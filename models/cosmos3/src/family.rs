//! Cosmos3 as one of the runtime's families ([`fastvideo_family`]): a diffusers
//! `Cosmos3OmniPipeline` folder served as a generation model (text to video, with sound when the
//! folder has a sound tokenizer, and text to image).

use std::any::Any;
use std::path::Path;
use std::sync::Arc;

use anyhow::{ensure, Result};
use fastvideo_family::{Family, LoadContext, LoadSummary, LoadedModel, ModelKind};
use fastvideo_pipeline::{LoopPolicies, PipelineSpec, WorkCount};
use fastvideo_request::ModelLimits;
use fastvideo_torch::Precision;
use tch::Kind;

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
        ensure!(ctx.gpus <= 1, "Cosmos3 runs on one GPU here (--gpus {} asked)", ctx.gpus);
        ensure!(!n.fp8_linears, "Cosmos3 has no FP8 linears yet (--fp8-linears)");
        ensure!(!ctx.tiny_decoder, "Cosmos3 folders have no tiny decoder");
        ensure!(!ctx.offload_experts, "Cosmos3 has one transformer (--offload-experts)");
        let kind = n.dtype.resolve(ctx.device);
        let vae_kind = n.vae_dtype.resolve_or(ctx.device, fastvideo_wan::VAE_CUDA_DEFAULT);
        let model = Cosmos3Model::load(dir, ctx.device, kind, vae_kind)?;
        let summary = LoadSummary {
            family: "cosmos3",
            dir: dir.to_path_buf(),
            device: ctx.device,
            precision: if kind == Kind::Float && vae_kind == Kind::Float { Precision::Exact } else { Precision::Bf16 },
            fp8_linears: false,
            int8_attention: None,
            dtype: kind,
            text_encoder_dtype: None,
            vae_dtype: Some(vae_kind),
            tiny_decoder: false,
            parallel: None,
            seconds: t0.elapsed().as_secs_f64(),
            note: None,
        };
        let spec = Arc::new(crate::pipeline::spec(&model)?);
        Ok(Box::new(LoadedCosmos3 { model, spec, summary }))
    }
}

/// A loaded Cosmos3 folder behind the seam.
pub struct LoadedCosmos3 {
    /// Its components.
    pub model: Cosmos3Model,
    spec: Arc<PipelineSpec>,
    summary: LoadSummary,
}

impl LoadedModel for LoadedCosmos3 {
    fn summary(&self) -> &LoadSummary {
        &self.summary
    }

    fn limits(&self) -> ModelLimits {
        self.model.limits()
    }

    /// The omni pipeline (its guidance is the pipeline's own: one scale for every modality).
    fn pipeline(&self, _policies: LoopPolicies) -> Result<Arc<PipelineSpec>> {
        Ok(self.spec.clone())
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
        let (und, gen) = self.model.transformer.bytes();
        und + gen
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
