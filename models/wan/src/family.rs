//! Wan as the runtime's families ([`fastvideo_family`]): [`WAN`] serves the diffusers Wan
//! pipelines as generation models, [`WAN_WORLD`] a Wan folder with `world.json` and
//! `action_embedder/` as a world model for sessions.

use std::any::Any;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use fastvideo_family::{
    Autoencoder, Family, LoadContext, LoadSummary, LoadedModel, ModelKind, SessionOptions, SleepTier, UnknownWords,
    WeightSource,
};
use fastvideo_pipeline::session::SessionModel;
use fastvideo_pipeline::{EmbeddingCache, LoopPolicies, PipelineSpec, Residency, WorkCount};
use fastvideo_request::ModelLimits;
use fastvideo_torch::{Int8Attention, Numerics, Precision};

use crate::lora_keys::WanKeys;
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
        lazy_transformer: lazy && ctx.transformer.is_none(),
        transformer_file: ctx.transformer.clone(),
        max_device_memory: ctx.max_device_memory,
        auto_stream: false,
    }
}

/// The 8-bit attention recipe `fast` runs on generation models where a kernel can run it: set by
/// the quality gate (docs/benchmarks.md). e4m3 P·V passed once its recipe took one Q scale per
/// row and V smoothed (`attention8::Recipe::shipped`): −0.71 points over 2,400 clips.
pub const FAST_INT8_ATTENTION: Int8Attention = Int8Attention::Fp8Pv;

/// The same for world models, gated on their own eval: f16 P·V with per-row Q scales stayed
/// within 0.3 points of bf16's action following, e4m3 within 0.9, so the world model takes the
/// closer one. Its `fast` also decodes with the folder's tiny decoder, which passed that gate.
pub const FAST_WORLD_INT8_ATTENTION: Int8Attention = Int8Attention::F16Pv;

/// `fast`'s 8-bit attention on `device`: only where a kernel can run it (a CPU would compute the
/// quantized function in float32, slower than plain attention: 1.6-1.8x per step).
fn fast_attention(n: &Numerics, device: tch::Device, recipe: Int8Attention) -> Option<Int8Attention> {
    (n.preset == Precision::Fast && device.is_cuda()).then_some(recipe)
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

    fn lora_key_map(&self) -> Option<&'static dyn fastvideo_lora::KeyMap> {
        Some(&WanKeys)
    }

    fn implies(&self, mut n: Numerics, device: tch::Device) -> Numerics {
        n.int8_attention = fast_attention(&n, device, FAST_INT8_ATTENTION);
        n
    }

    fn load(&self, dir: &Path, ctx: &LoadContext) -> Result<Box<dyn LoadedModel>> {
        anyhow::ensure!(
            ctx.gpus <= 1 || ctx.max_device_memory.is_none(),
            "--max-device-memory streams blocks on one GPU; a step split over {} GPUs (--gpus) loads whole on each",
            ctx.gpus
        );
        let opts = LoadOptions { auto_stream: ctx.gpus <= 1, ..options(ctx, ctx.lazy) };
        let mut model = WanModel::load_with(dir, opts)?;
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
        tiny_decoder: false,
        parallel: model.parallel.as_ref().map(|p| format!("{:?} over {:?}", p.plan(), p.devices())),
        seconds: r.seconds,
        note: model.run.description.clone(),
        quantized_weights: r.quantized_weights.clone(),
        device_budget: r.device_budget.clone(),
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

    fn work(&self) -> WorkCount {
        crate::work::work(&self.model)
    }

    fn autoencoder(&self) -> Option<&dyn Autoencoder> {
        Some(self)
    }

    fn resident_bytes(&self) -> u64 {
        crate::residency::resident_bytes(&self.model)
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
    /// One transformer on one device, whole: the offloaded, streamed and split layouts manage
    /// their own weights.
    fn can_sleep(&self) -> bool {
        self.model.low_noise.is_none()
            && self.model.parallel.is_none()
            && self.model.transformer.block_stream().is_none()
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

    fn lora_key_map(&self) -> Option<&'static dyn fastvideo_lora::KeyMap> {
        Some(&WanKeys)
    }

    fn implies(&self, mut n: Numerics, device: tch::Device) -> Numerics {
        n.int8_attention = fast_attention(&n, device, FAST_WORLD_INT8_ATTENTION);
        n.tiny_decoder = n.preset == Precision::Fast;
        n
    }

    fn load(&self, dir: &Path, ctx: &LoadContext) -> Result<Box<dyn LoadedModel>> {
        // Sessions run the blocks through their own cached path (causal.rs), which streams nothing.
        ctx.no_device_budget("A Wan world model")?;
        let world = WorldModel::load(dir, options(ctx, false))?;
        let world = if ctx.tiny_decoder {
            world.with_tiny_decoder().context("tiny_decoder")?
        } else if ctx.numerics.tiny_decoder && world.wan.tiny_vae.is_some() {
            world.with_tiny_decoder()?
        } else {
            world
        };
        let tiny_decoder = world.decoder == crate::world::FrameDecoder::Tiny;
        let summary = LoadSummary { family: "wan-world", tiny_decoder, ..summary(&world.wan) };
        Ok(Box::new(LoadedWorld { world: Arc::new(world), summary }))
    }
}

impl Autoencoder for LoadedWan {
    fn roundtrip(&self, pixels: &tch::Tensor) -> Result<tch::Tensor> {
        let vae = &self.model.vae;
        vae.decode(&vae.encode(&pixels.to_device(self.model.device))?)
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

    fn work(&self) -> WorkCount {
        crate::work::world_work(&self.world)
    }

    fn resident_bytes(&self) -> u64 {
        crate::residency::resident_bytes(&self.world.wan)
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
        // Kernels compiled and library plans made now, not in the first session's first chunk.
        tch::no_grad(|| crate::offline_rollout::warm_up(&self.world, self.summary.device))
            .map_err(|e| e.context(format!("warming up the world model {}", self.summary.dir.display())))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use fastvideo_torch::{DtypeChoice, Int8Attention, Precision};
    use tch::Device;

    use super::*;

    #[test]
    fn fast_runs_what_each_kinds_gate_admitted() {
        let (a, cuda) = (DtypeChoice::Auto, Device::Cuda(0));
        let fast = Precision::Fast.numerics(cuda, a, a).unwrap();
        let generation = WAN.implies(fast, cuda);
        assert_eq!((generation.int8_attention, generation.tiny_decoder), (Some(FAST_INT8_ATTENTION), false));
        assert_eq!(generation.lossy_paths(), [FAST_INT8_ATTENTION.name()]);
        let world = WAN_WORLD.implies(fast, cuda);
        assert_eq!(world.int8_attention, Some(FAST_WORLD_INT8_ATTENTION));
        assert!(world.tiny_decoder, "the tiny decoder passed the world gate");
        assert_ne!(FAST_WORLD_INT8_ATTENTION, FAST_INT8_ATTENTION, "each kind's own gate");
        // A named recipe stands on a world model too; bf16 implies nothing on either kind.
        let named = world.with_int8_attention(Some(Int8Attention::Fp8Pv)).unwrap();
        assert_eq!(named.int8_attention, Some(Int8Attention::Fp8Pv));
        let bf16 = Precision::Bf16.numerics(cuda, a, a).unwrap();
        assert_eq!((WAN.implies(bf16, cuda), WAN_WORLD.implies(bf16, cuda)), (bf16, bf16));
        // On a CPU `fast` implies no 8-bit attention (emulated it would be slower); named, it runs.
        let cpu = Precision::Fast.numerics(Device::Cpu, a, a).unwrap();
        assert_eq!(
            (WAN.implies(cpu, Device::Cpu).int8_attention, WAN_WORLD.implies(cpu, Device::Cpu).int8_attention),
            (None, None)
        );
        assert!(cpu.with_int8_attention(Some(Int8Attention::F16Pv)).unwrap().int8_attention.is_some());
    }
}
