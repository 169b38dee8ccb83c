//! LTX-2 as one of the runtime's families ([`fastvideo_family`]): a diffusers `LTX2Pipeline`
//! folder served as a generation model that makes video with sound.

use std::any::Any;
use std::path::Path;
use std::sync::Arc;

use anyhow::Result;
use fastvideo_family::{Family, LoadContext, LoadSummary, LoadedModel, ModelKind};
use fastvideo_pipeline::{LoopPolicies, PipelineSpec, WorkCount};
use fastvideo_request::ModelLimits;
use tch::Kind;

use crate::model::{Ltx2Model, PIPELINE_CLASS};

/// LTX-2 (2.0 and 2.3 layouts).
pub struct Ltx2;

/// The family entry the registry lists.
pub static LTX2: Ltx2 = Ltx2;

impl Family for Ltx2 {
    fn name(&self) -> &'static str {
        "ltx2"
    }

    fn architectures(&self) -> &'static [&'static str] {
        &[PIPELINE_CLASS]
    }

    fn kind(&self) -> ModelKind {
        ModelKind::Generation
    }

    fn lora_key_map(&self) -> Option<&'static dyn fastvideo_lora::KeyMap> {
        Some(&crate::lora_keys::Ltx2Keys)
    }

    fn load(&self, dir: &Path, ctx: &LoadContext) -> Result<Box<dyn LoadedModel>> {
        let t0 = std::time::Instant::now();
        let n = &ctx.numerics;
        ctx.one_gpu_plain("LTX-2")?;
        ctx.no_single_file("LTX-2")?;
        let kind = n.dtype.resolve(ctx.device);
        let vae_kind = n.vae_dtype.resolve_or(ctx.device, Kind::BFloat16);
        let model = Ltx2Model::load(dir, ctx.device, (kind, kind, vae_kind))?;
        let kinds = (kind, Some(kind), Some(vae_kind));
        let mut summary = LoadSummary::plain("ltx2", dir, ctx.device, kinds, t0.elapsed().as_secs_f64());
        summary.note = model.run.description.clone();
        let spec = Arc::new(crate::pipeline::spec(&model, Vec::new(), None)?);
        Ok(Box::new(LoadedLtx2 { model, spec, summary }))
    }
}

/// A loaded LTX-2 folder behind the seam.
pub struct LoadedLtx2 {
    /// Its components.
    pub model: Ltx2Model,
    spec: Arc<PipelineSpec>,
    summary: LoadSummary,
}

impl LoadedModel for LoadedLtx2 {
    fn summary(&self) -> &LoadSummary {
        &self.summary
    }

    fn limits(&self) -> ModelLimits {
        self.model.limits()
    }

    /// The two-stream pipeline, guided per stream by the deploy's stream guider or the
    /// pipeline's own rule (a one-stream guider cannot combine two streams, so it is not used
    /// here), after the deploy's prompt stages when it has any.
    fn pipeline(&self, policies: LoopPolicies) -> Result<Arc<PipelineSpec>> {
        match policies.text_stages.is_empty() && policies.stream_guidance.is_none() {
            true => Ok(self.spec.clone()),
            false => Ok(Arc::new(crate::pipeline::spec(&self.model, policies.text_stages, policies.stream_guidance)?)),
        }
    }

    /// Video and audio tokens a step: what one forward's cost grows with.
    fn work(&self) -> WorkCount {
        let g = self.model.geometry;
        Arc::new(move |r| {
            let [_, f, h, w] = g.video(r.num_frames, r.height, r.width);
            (f * h * w + g.audio_frames(r.num_frames, r.fps as f64)) as u64
        })
    }

    fn resident_bytes(&self) -> u64 {
        self.model.bytes
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
