//! FLUX.2 [klein] as one of the runtime's families ([`fastvideo_family`]): a diffusers
//! `Flux2KleinPipeline` folder served as an image model (text to image, edits).

use std::any::Any;
use std::path::Path;
use std::sync::Arc;

use anyhow::Result;
use fastvideo_family::{Family, LoadContext, LoadSummary, LoadedModel, ModelKind};
use fastvideo_pipeline::{LoopPolicies, PipelineSpec, WorkCount};
use fastvideo_request::ModelLimits;
use tch::Kind;

use crate::model::Flux2Model;

/// FLUX.2 [klein].
pub struct Flux2;

/// The family entry the registry lists.
pub static FLUX2: Flux2 = Flux2;

impl Family for Flux2 {
    fn name(&self) -> &'static str {
        "flux2"
    }

    fn architectures(&self) -> &'static [&'static str] {
        &["Flux2KleinPipeline"]
    }

    fn kind(&self) -> ModelKind {
        ModelKind::Generation
    }

    fn lora_key_map(&self) -> Option<&'static dyn fastvideo_lora::KeyMap> {
        Some(&crate::lora_keys::Flux2Keys)
    }

    fn load(&self, dir: &Path, ctx: &LoadContext) -> Result<Box<dyn LoadedModel>> {
        let t0 = std::time::Instant::now();
        let n = &ctx.numerics;
        ctx.one_gpu_plain("FLUX.2")?;
        ctx.no_single_file("FLUX.2")?;
        let kind = n.dtype.resolve(ctx.device);
        let vae_kind = n.vae_dtype.resolve_or(ctx.device, Kind::BFloat16);
        let model = Flux2Model::load(dir, ctx.device, kind, kind, vae_kind)?;
        let kinds = (kind, Some(kind), Some(vae_kind));
        let summary = LoadSummary::plain("flux2", dir, ctx.device, kinds, t0.elapsed().as_secs_f64());
        let spec = Arc::new(crate::pipeline::spec(&model)?);
        Ok(Box::new(LoadedFlux2 { model, spec, summary }))
    }
}

/// A loaded FLUX.2 folder behind the seam.
pub struct LoadedFlux2 {
    /// Its components.
    pub model: Flux2Model,
    spec: Arc<PipelineSpec>,
    summary: LoadSummary,
}

impl LoadedModel for LoadedFlux2 {
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

    /// Tokens a step attends over: the picture's, its references' and the padded prompt's.
    fn work(&self) -> WorkCount {
        let p = self.model.pixels_per_token() as u64;
        Arc::new(move |r| {
            let image = (r.height as u64 / p) * (r.width as u64 / p);
            let refs: u64 = r
                .images
                .iter()
                .map(|i| {
                    let (w, h) = crate::condition::REFERENCES.used_size(i.width, i.height, p as u32);
                    (w as u64 / p) * (h as u64 / p)
                })
                .sum();
            image + refs + crate::prompt::MAX_TOKENS as u64
        })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
