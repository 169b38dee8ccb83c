//! A loaded model as the runtime sees it: its limits, its pipeline graph, a summary of the load,
//! and the capabilities its family offers.

use std::any::Any;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use fastvideo_pipeline::session::SessionModel;
use fastvideo_pipeline::token::KvBlockPool;
use fastvideo_pipeline::{
    AdapterCache, AdapterTarget, EmbeddingCache, LoopPolicies, PipelineSpec, Residency, WeightLoader, WorkCount,
};
use fastvideo_request::chat::ChatCodec;
use fastvideo_request::{ModelLimits, RequestError, ResolvedRequest};
use fastvideo_torch::{Int8Attention, Precision};
use tch::{Device, Kind};

use crate::context::SleepTier;

/// What a load came to, as every front end prints and describes it.
#[derive(Debug, Clone)]
pub struct LoadSummary {
    /// The family's name (`wan`, `qwen`, …).
    pub family: &'static str,
    /// The folder it came from.
    pub dir: PathBuf,
    /// The device it runs on (rank 0 when split).
    pub device: Device,
    /// The precision preset served, resolved.
    pub precision: Precision,
    /// FP8 linears in the inner blocks.
    pub fp8_linears: bool,
    /// The 8-bit attention recipe, if any.
    pub int8_attention: Option<Int8Attention>,
    /// The main network's dtype (the transformer, or the language model).
    pub dtype: Kind,
    /// The text encoder's dtype, where the model has one.
    pub text_encoder_dtype: Option<Kind>,
    /// The VAE's dtype, where the model has one.
    pub vae_dtype: Option<Kind>,
    /// Frames are decoded by a tiny distilled decoder instead of the model's VAE (a lossy
    /// path of its own).
    pub tiny_decoder: bool,
    /// How it is split over GPUs, when it is.
    pub parallel: Option<String>,
    /// Seconds the load took.
    pub seconds: f64,
    /// Free text the folder carries for users (e.g. "random weights").
    pub note: Option<String>,
    /// Weights the checkpoint stores quantized and that run so (a lossy format of the file's
    /// own, e.g. `GGUF Q4_K ×20, Q6_K ×8`), when it does.
    pub quantized_weights: Option<String>,
    /// What a device budget (`--max-device-memory`) streams from host memory, when something
    /// does (one line).
    pub device_budget: Option<String>,
}

impl LoadSummary {
    /// The summary of a plain one-device load (no FP8, no 8-bit attention, no split): exact
    /// when every part runs in float32, else bf16.
    pub fn plain(
        family: &'static str,
        dir: &std::path::Path,
        device: Device,
        kinds: (Kind, Option<Kind>, Option<Kind>),
        seconds: f64,
    ) -> Self {
        let (dtype, text_encoder_dtype, vae_dtype) = kinds;
        let all_f32 = [Some(dtype), text_encoder_dtype, vae_dtype].iter().flatten().all(|k| *k == Kind::Float);
        Self {
            family,
            dir: dir.to_path_buf(),
            device,
            precision: if all_f32 { Precision::Exact } else { Precision::Bf16 },
            fp8_linears: false,
            int8_attention: None,
            dtype,
            text_encoder_dtype,
            vae_dtype,
            tiny_decoder: false,
            parallel: None,
            seconds,
            note: None,
            quantized_weights: None,
            device_budget: None,
        }
    }

    /// The lossy paths it runs (`fp8_linears`, `int8_attention`, …), for the precision check.
    pub fn lossy_paths(&self) -> Vec<&'static str> {
        let mut paths = fastvideo_torch::lossy_paths(self.fp8_linears, self.int8_attention);
        if self.tiny_decoder {
            paths.push("tiny_decoder");
        }
        if self.quantized_weights.is_some() {
            paths.push("quantized_weights");
        }
        paths
    }
}

/// The checkpoint new weights replace, and how to load them.
pub struct WeightSource {
    /// Loads other weights into a new pipeline.
    pub loader: Arc<dyn WeightLoader>,
    /// Where the start weights came from (epoch 0).
    pub initial: PathBuf,
}

/// Draws a first frame for a seed at a width and height, as the model's input
/// `[1, 3, 1, H, W]` in [-1, 1].
pub type DrawFrame = Arc<dyn Fn(u64, u32, u32) -> Result<tch::Tensor> + Send + Sync>;

/// An admission check of a resolved request; errors name the field.
pub type RequestCheck = Arc<dyn Fn(&ResolvedRequest) -> Result<(), RequestError> + Send + Sync>;

/// What sessions of a world model are made with.
pub struct SessionOptions {
    /// The id sessions list and requests name.
    pub id: String,
    /// Sessions at once (the key/value pool is sized for them).
    pub max_sessions: usize,
    /// The deploy's policies, bound into the session pipeline.
    pub policies: LoopPolicies,
    /// The first frame of a session, by seed, drawn by the caller's simulator; `None`: the
    /// session's request brings it.
    pub first_frame: Option<DrawFrame>,
    /// LoRA adapters sessions may name.
    pub adapters: Option<Arc<AdapterCache>>,
    /// How the weights sleep while no session runs.
    pub residency: Option<Arc<dyn Residency>>,
}

/// A language model's chat face: the codec the chat routes render with, the key/value pool to
/// watch, and the admission check of a chat request.
pub struct ChatServing {
    /// Renders messages and decodes tokens.
    pub codec: Arc<dyn ChatCodec>,
    /// The paged key/value pool the decode loop draws from.
    pub kv_pool: Arc<KvBlockPool>,
    /// Refuses what could never run (e.g. more positions than the pool holds).
    pub check: RequestCheck,
    /// A chat served beside the model's generation pipeline, on the same weights (an omni
    /// model's reasoner); `None` when the model's own pipeline is the chat (a language model).
    pub beside: Option<ChatPipeline>,
}

/// The pipeline and rules of a chat served beside a generation model.
pub struct ChatPipeline {
    /// The chat pipeline (tokenize, the decode loop on `kv_pool`).
    pub spec: Arc<PipelineSpec>,
    /// What a chat request to it may ask.
    pub limits: ModelLimits,
}

/// A model's pixel autoencoder on its own: what a VAE round trip (`eval --vae-roundtrip`, the
/// ceiling the denoiser can reach) measures, whatever the family's latent layout.
pub trait Autoencoder: Send + Sync {
    /// Pixels `[1, 3, F, H, W]` in [-1, 1] (any device) through the encoder and the decoder,
    /// answered on the model's device in the same layout.
    fn roundtrip(&self, pixels: &tch::Tensor) -> Result<tch::Tensor>;
}

/// The words of a prompt a model's text encoder does not know.
pub type UnknownWords = Arc<dyn Fn(&str) -> Vec<String> + Send + Sync>;

/// The optional capabilities, by name (the refusal of a missing one names it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capability {
    /// LoRA adapters on requests.
    Adapters,
    /// Live weight updates.
    WeightUpdates,
    /// Sleeping off the device.
    Residency,
    /// Interactive sessions.
    Sessions,
    /// Chat completions.
    Chat,
    /// A pixel autoencoder (VAE) of its own, usable outside a pipeline.
    Autoencoder,
}

impl Capability {
    /// The name operators see.
    pub fn name(self) -> &'static str {
        match self {
            Capability::Adapters => "LoRA adapters",
            Capability::WeightUpdates => "weight updates",
            Capability::Residency => "sleeping off the device",
            Capability::Sessions => "sessions",
            Capability::Chat => "chat",
            Capability::Autoencoder => "an autoencoder",
        }
    }
}

/// The refusal of a capability the model's family does not offer.
pub fn missing(model: &str, family: &str, capability: Capability) -> anyhow::Error {
    anyhow::anyhow!("model `{model}` ({family}) does not offer {}", capability.name())
}

/// A model a family loaded. The required methods are what every model has; the capabilities
/// default to "not offered".
pub trait LoadedModel: Send + Sync {
    /// What the load came to.
    fn summary(&self) -> &LoadSummary;

    /// What requests it accepts and its defaults.
    fn limits(&self) -> ModelLimits;

    /// Its one pipeline graph for every task it serves, with the deploy's `policies` bound.
    fn pipeline(&self, policies: LoopPolicies) -> Result<Arc<PipelineSpec>>;

    /// Its unit of work per forward for a request (tokens, not pixels): the key its step times
    /// are learned and predicted by.
    fn work(&self) -> WorkCount;

    /// Device bytes of its large weights (what a weight budget counts).
    fn resident_bytes(&self) -> u64 {
        0
    }

    /// Loaded lazily: bytes of weights not yet read (`None`: all read, or not lazily loadable).
    fn deferred_bytes(&self) -> Option<u64> {
        None
    }

    /// What LoRA adapters apply to outside a pipeline (sessions); a pipeline's own target is
    /// its spec's `adapters`.
    fn adapter_target(&self) -> Option<Arc<dyn AdapterTarget>> {
        None
    }

    /// Weight updates: the loader for new weights with `policies` bound.
    fn weight_updates(&self, _policies: LoopPolicies) -> Option<WeightSource> {
        None
    }

    /// How its weights leave the device and come back, where it may sleep.
    fn residency(&self, _tier: SleepTier) -> Result<Option<Arc<dyn Residency>>> {
        Ok(None)
    }

    /// Interactive sessions.
    fn sessions(&self, _options: SessionOptions) -> Result<Option<Arc<dyn SessionModel>>> {
        Ok(None)
    }

    /// Chat completions.
    fn chat(&self) -> Option<ChatServing> {
        None
    }

    /// A prompt rewriter on the model's own weights (an omni model's reasoner), used for
    /// `prompt_extend` when the deploy names no separate extender.
    fn rewriter(&self) -> Option<Arc<dyn crate::PromptRewriter>> {
        None
    }

    /// Its pixel autoencoder, for tools that measure it alone.
    fn autoencoder(&self) -> Option<&dyn Autoencoder> {
        None
    }

    /// Its cache of prompt embeddings (for the hit/miss metrics).
    fn text_cache(&self) -> Option<Arc<EmbeddingCache>> {
        None
    }

    /// What finds the words of a prompt its text encoder does not know (prompt warnings);
    /// `None`: it cannot tell.
    fn unknown_words(&self) -> Option<UnknownWords> {
        None
    }

    /// Makes the large weights ready before the first request (compiling kernels, planning
    /// libraries); answers the seconds it took.
    fn warm_up(&self) -> Result<f64> {
        Ok(0.0)
    }

    /// The concrete model, for the family's own tools and tests.
    fn as_any(&self) -> &dyn Any;
}
