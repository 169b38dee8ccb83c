//! Qwen-Image as one of the runtime's families ([`fastvideo_family`]): a diffusers
//! `QwenImagePipeline` folder served as an image model.

use std::any::Any;
use std::path::Path;
use std::sync::Arc;

use anyhow::Result;
use fastvideo_family::{Family, LoadContext, LoadSummary, LoadedModel, ModelKind};
use fastvideo_pipeline::{LoopPolicies, PipelineSpec, WorkCount};
use fastvideo_request::ModelLimits;
use tch::Kind;

use crate::model::QwenImageModel;

/// Qwen-Image.
pub struct QwenImage;

/// The family entry the registry lists.
pub static QWEN_IMAGE: QwenImage = QwenImage;

impl Family for QwenImage {
    fn name(&self) -> &'static str {
        "qwenimage"
    }

    fn architectures(&self) -> &'static [&'static str] {
        &["QwenImagePipeline", "QwenImageEditPipeline", "QwenImageEditPlusPipeline"]
    }

    fn kind(&self) -> ModelKind {
        ModelKind::Generation
    }

    fn lora_key_map(&self) -> Option<&'static dyn fastvideo_lora::KeyMap> {
        Some(&crate::lora_keys::QwenImageKeys)
    }

    fn load(&self, dir: &Path, ctx: &LoadContext) -> Result<Box<dyn LoadedModel>> {
        let t0 = std::time::Instant::now();
        let n = &ctx.numerics;
        ctx.one_gpu_plain("Qwen-Image")?;
        let kind = n.dtype.resolve(ctx.device);
        let vae_kind = n.vae_dtype.resolve_or(ctx.device, Kind::BFloat16);
        let model = QwenImageModel::load(dir, ctx.transformer.as_deref(), ctx.device, (kind, kind, vae_kind))?;
        let kinds = (kind, Some(kind), Some(vae_kind));
        let mut summary = LoadSummary::plain("qwenimage", dir, ctx.device, kinds, t0.elapsed().as_secs_f64());
        summary.quantized_weights = model.quantized_weights.clone();
        let spec = Arc::new(crate::pipeline::spec(&model)?);
        Ok(Box::new(LoadedQwenImage { model, spec, summary }))
    }
}

/// A loaded Qwen-Image folder behind the seam.
pub struct LoadedQwenImage {
    /// Its components.
    pub model: QwenImageModel,
    spec: Arc<PipelineSpec>,
    summary: LoadSummary,
}

impl LoadedModel for LoadedQwenImage {
    fn summary(&self) -> &LoadSummary {
        &self.summary
    }

    fn limits(&self) -> ModelLimits {
        self.model.limits()
    }

    fn pipeline(&self, policies: LoopPolicies) -> Result<Arc<PipelineSpec>> {
        match policies.text_stages.is_empty() {
            true => Ok(self.spec.clone()),
            false => Ok(Arc::new(crate::pipeline::spec_with(&self.model, policies.text_stages)?)),
        }
    }

    /// Tokens a step attends over: the picture's and the prompt's (about 100 for a short one).
    fn work(&self) -> WorkCount {
        let p = self.model.pixels_per_token() as u64;
        Arc::new(move |r| (r.height as u64 / p) * (r.width as u64 / p) + 100)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
