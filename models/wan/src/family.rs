//! Wan as the runtime's families ([`fastvideo_family`]): [`WAN`] serves the diffusers Wan
//! pipelines as generation models, [`WAN_WORLD`] a Wan folder with `world.json` and
//! `action_embedder/` as a world model for sessions.

use std::any::Any;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use fastvideo_family::{
    Capability, Family, LoadContext, LoadSummary, LoadedModel, ModelKind, SessionOptions, SleepTier, UnknownWords,
    WeightSource,
};
use fastvideo_pipeline::session::SessionModel;
use fastvideo_pipeline::{EmbeddingCache, LoopPolicies, PipelineSpec, Residency};
use fastvideo_request::ModelLimits;
use fastvideo_torch::Numerics;

use crate::sessions::WorldSessions;
use crate::world::WorldModel;
use crate::{LoadOptions, WanModel};

/// The diffusers pipeline classes a Wan folder declares.
const ARCHITECTURES: &[&str] = &["WanPipeline", "WanImageToVideoPipeline", "WanVideoToVideoPipeline"];

/// Wan 2.1 / 2.2 generation models.
pub struct Wan;

/// The family entry the registry lists.
pub static WAN: Wan = Wan;

/// A Wan world model (a block-causal Wan with an action embedder).
pub struct WanWorld;

/// The family entry the registry lists.
pub static WAN_WORLD: WanWorld = WanWorld;

fn options(ctx: &LoadContext, lazy: bool) -> LoadOptions {
    let n = &ctx.numerics;
    LoadOptions {
        device: ctx.device,
        dtype: n.dtype,
        vae_dtype: n.vae_dtype,
        offload_experts: ctx.offload_experts,
        fp8_linears: n.fp8_linears,
        int8_attention: n.int8_attention,
        precision: n.preset,
        lazy_transformer: lazy,
    }
}

impl Family for Wan {
    fn name(&self) -> &'static str {
        "wan"
    }

    fn architectures(&self) -> &'static [&'static str] {
        ARCHITECTURES
    }

    fn kind(&self) -> ModelKind {
        ModelKind::Generation
    }

    fn load(&self, dir: &Path, ctx: &LoadContext) -> Result<Box<dyn LoadedModel>> {
        let mut model = WanModel::load_with(dir, options(ctx, ctx.lazy))?;
        crate::parallel::setup(&mut model, ctx.gpus, ctx.parallel)?;
        Ok(Box::new(LoadedWan::new(model)))
    }
}

/// A loaded Wan model behind the seam.
pub struct LoadedWan {
    /// The model itself (the family's own tools reach it through `as_any`).
    pub model: WanModel,
    summary: LoadSummary,
}

impl LoadedWan {
    /// Wraps `model`.
    pub fn new(model: WanModel) -> Self {
        let summary = summary(&model);
        Self { model, summary }
    }
}

fn summary(model: &WanModel) -> LoadSummary {
    let r = &model.load_report;
    LoadSummary {
        family: "wan",
        dir: model.dir.clone(),
        device: model.device,
        precision: r.precision,
        fp8_linears: r.fp8_linears,
        int8_attention: r.int8_attention,
        dtype: r.transformer_dtype,
        text_encoder_dtype: Some(r.text_encoder_dtype),
        vae_dtype: Some(r.vae_dtype),
        parallel: model.parallel.as_ref().map(|p| format!("{:?} over {:?}", p.plan(), p.devices())),
        seconds: r.seconds,
        note: model.run.description.clone(),
    }
}

impl LoadedModel for LoadedWan {
    fn summary(&self) -> &LoadSummary {
        &self.summary
    }

    fn limits(&self) -> ModelLimits {
        self.model.limits()
    }

    fn pipeline(&self, policies: LoopPolicies) -> Result<Arc<PipelineSpec>> {
        crate::pipeline::text_to_video_with(&self.model, policies).map(Arc::new)
    }

    fn resident_bytes(&self) -> u64 {
        crate::residency::resident_bytes(&self.model)
    }

    fn capabilities(&self) -> Vec<Capability> {
        let mut c = vec![Capability::WeightUpdates];
        if self.model.parallel.is_none() {
            c.push(Capability::Adapters);
        }
        if self.can_sleep() {
            c.push(Capability::Residency);
        }
        c
    }

    fn deferred_bytes(&self) -> Option<u64> {
        self.model.load_report.deferred_linear_bytes
    }

    fn weight_updates(&self, policies: LoopPolicies) -> Option<WeightSource> {
        Some(WeightSource {
            loader: Arc::new(crate::update::WanWeightLoader::new(&self.model, policies)),
            initial: self.model.dir.join("transformer"),
        })
    }

    fn residency(&self, tier: SleepTier) -> Result<Option<Arc<dyn Residency>>> {
        if !self.can_sleep() {
            return Ok(None);
        }
        Ok(Some(match tier {
            SleepTier::Host => Arc::new(crate::residency::TransformerResidency::new(&self.model)),
            SleepTier::Disk => Arc::new(crate::residency::DiskResidency::new(&self.model)?),
        }))
    }

    fn text_cache(&self) -> Option<Arc<EmbeddingCache>> {
        Some(self.model.text_cache.clone())
    }

    fn unknown_words(&self) -> Option<UnknownWords> {
        let tokenizer = self.model.tokenizer.clone();
        Some(Arc::new(move |prompt| tokenizer.unknown_words(prompt)))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl LoadedWan {
    /// One transformer on one device: the offloaded and split layouts manage their own weights.
    fn can_sleep(&self) -> bool {
        self.model.low_noise.is_none() && self.model.parallel.is_none()
    }
}

impl Family for WanWorld {
    fn name(&self) -> &'static str {
        "wan-world"
    }

    fn architectures(&self) -> &'static [&'static str] {
        ARCHITECTURES
    }

    fn kind(&self) -> ModelKind {
        ModelKind::World
    }

    fn implies(&self, numerics: Numerics) -> Numerics {
        numerics.for_world()
    }

    fn load(&self, dir: &Path, ctx: &LoadContext) -> Result<Box<dyn LoadedModel>> {
        let world = WorldModel::load(dir, options(ctx, false))?;
        let world = if ctx.tiny_decoder {
            world.with_tiny_decoder().context("tiny_decoder")?
        } else if ctx.numerics.tiny_decoder && world.wan.tiny_vae.is_some() {
            world.with_tiny_decoder()?
        } else {
            world
        };
        let summary = LoadSummary { family: "wan-world", ..summary(&world.wan) };
        Ok(Box::new(LoadedWorld { world: Arc::new(world), summary }))
    }
}

/// A loaded world model behind the seam.
pub struct LoadedWorld {
    /// The model itself.
    pub world: Arc<WorldModel>,
    summary: LoadSummary,
}

impl LoadedModel for LoadedWorld {
    fn summary(&self) -> &LoadSummary {
        &self.summary
    }

    fn limits(&self) -> ModelLimits {
        crate::sessions::limits(&self.world)
    }

    /// One session's pipeline over a pool of its own: what a local rollout runs.
    fn pipeline(&self, policies: LoopPolicies) -> Result<Arc<PipelineSpec>> {
        let id = self.summary.dir.display().to_string();
        let s = WorldSessions::new(id, self.world.clone(), 1, self.summary.device, policies, None)?;
        Ok(s.pipeline())
    }

    fn resident_bytes(&self) -> u64 {
        crate::residency::resident_bytes(&self.world.wan)
    }

    fn capabilities(&self) -> Vec<Capability> {
        vec![Capability::Sessions, Capability::Adapters, Capability::Residency]
    }

    fn residency(&self, _tier: SleepTier) -> Result<Option<Arc<dyn Residency>>> {
        Ok(Some(Arc::new(crate::residency::TransformerResidency::new(&self.world.wan))))
    }

    fn adapter_target(&self) -> Option<Arc<dyn fastvideo_pipeline::AdapterTarget>> {
        Some(Arc::clone(&self.world.wan.transformer) as Arc<dyn fastvideo_pipeline::AdapterTarget>)
    }

    fn sessions(&self, o: SessionOptions) -> Result<Option<Arc<dyn SessionModel>>> {
        let first = o.first_frame.map(|draw| {
            let (w, h) = (self.world.spec.width, self.world.spec.height);
            Arc::new(move |seed| draw(seed, w, h)) as crate::sessions::FirstFrame
        });
        let s = WorldSessions::new(o.id, self.world.clone(), o.max_sessions, self.summary.device, o.policies, first)?
            .with_adapters(o.adapters)
            .with_residency(o.residency);
        Ok(Some(Arc::new(s)))
    }

    fn text_cache(&self) -> Option<Arc<EmbeddingCache>> {
        Some(self.world.wan.text_cache.clone())
    }

    fn warm_up(&self) -> Result<f64> {
        if !self.summary.device.is_cuda() {
            return Ok(0.0);
        }
        // Kernels compiled and library plans made now, not in the first session's first chunk.
        tch::no_grad(|| crate::chunk_rollout::warm_up(&self.world, self.summary.device))
            .map_err(|e| e.context(format!("warming up the world model {}", self.summary.dir.display())))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
