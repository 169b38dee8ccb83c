//! What a load is asked for ([`LoadOptions`]) and what it reports ([`LoadReport`]).

use fastvideo_torch::{DtypeChoice, Int8Attention, Precision};
use tch::{Device, Kind};

/// How to load a model: the device and the compute dtype of each component.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Where every component runs (rank 0's device when split over GPUs).
    pub device: Device,
    /// The transformer's and the text encoder's dtype (auto: bf16 on CUDA, fp32 on CPU).
    pub dtype: DtypeChoice,
    /// The VAE's dtype (auto: [`VAE_CUDA_DEFAULT`] on CUDA, fp32 on CPU).
    pub vae_dtype: DtypeChoice,
    /// A two-expert model keeps one expert on the device, the other in pinned host memory
    /// (swapped when a step needs it). Ignored for models with one transformer.
    pub offload_experts: bool,
    /// `--fp8-linears`: the inner transformer blocks' linears in FP8.
    pub fp8_linears: bool,
    /// `--int8-attention` / `--int8-qk-attention` (or `precision = fast` where its gate admits
    /// one): 8-bit self-attention with that recipe.
    pub int8_attention: Option<Int8Attention>,
    /// The precision preset these options came from (reported, never acted on here).
    pub precision: Precision,
    /// Served lazily: the transformer's linears are checked against the checkpoint but not read
    /// ([`Weights::defer_linears`](fastvideo_torch::weights::Weights::defer_linears)); the
    /// model's first wake reads them. Taken only for one transformer without FP8 linears
    /// ([`LoadReport::deferred_linear_bytes`] says whether it was).
    pub lazy_transformer: bool,
    /// `--transformer FILE`: the transformer's weights from one file instead of the folder's
    /// (`crate::single_file`); the folder's config still gives the architecture.
    pub transformer_file: Option<std::path::PathBuf>,
    /// `--max-device-memory`: the bytes the weights and activations may take on the device;
    /// what does not fit streams from pinned host memory (`crate::device_budget`). Without it a
    /// GPU load streams only when the weights exceed the free memory.
    pub max_device_memory: Option<u64>,
    /// Without `max_device_memory`, stream what does not fit in the GPU's free memory (served
    /// generation models; off for world models, whose sessions stream nothing, and for tests).
    pub auto_stream: bool,
}

impl LoadOptions {
    /// Defaults on `device`: automatic dtypes, no lossy option, everything read at load.
    pub fn new(device: Device) -> Self {
        Self {
            device,
            dtype: DtypeChoice::Auto,
            vae_dtype: DtypeChoice::Auto,
            offload_experts: false,
            fp8_linears: false,
            int8_attention: None,
            precision: Precision::Auto,
            lazy_transformer: false,
            transformer_file: None,
            max_device_memory: None,
            auto_stream: false,
        }
    }
}

/// The VAE's dtype on CUDA when none is asked for, chosen by measurement (docs/benchmarks.md:
/// decode time and error against float32 at 480×832×81).
pub const VAE_CUDA_DEFAULT: Kind = Kind::BFloat16;

/// What loading cost, for logs and benchmarks.
#[derive(Debug, Clone)]
pub struct LoadReport {
    /// Wall time of the load.
    pub seconds: f64,
    /// The process's peak resident host memory after loading (VmHWM), if the OS reports it.
    pub host_peak_rss_bytes: Option<u64>,
    /// The dtype the transformer runs in.
    pub transformer_dtype: Kind,
    /// The dtype the text encoder runs in.
    pub text_encoder_dtype: Kind,
    /// The dtype the VAE runs in.
    pub vae_dtype: Kind,
    /// The precision preset served (`exact`, `bf16` or `fast`), resolved.
    pub precision: Precision,
    /// Whether the inner blocks' linears are stored in FP8.
    pub fp8_linears: bool,
    /// The 8-bit self-attention recipe, if any (where the device has the kernel; SDPA otherwise
    /// on CUDA).
    pub int8_attention: Option<Int8Attention>,
    /// Loaded lazily: bytes of the transformer linears not yet read (they come at the first
    /// wake); `None` when they were read.
    pub deferred_linear_bytes: Option<u64>,
    /// The transformer file's quantized formats, when its weights stay quantized (a GGUF file):
    /// `GGUF Q4_K ×20, Q6_K ×8`.
    pub quantized_weights: Option<String>,
    /// The single file the transformer's weights came from (`--transformer`), if any.
    pub transformer_file: Option<std::path::PathBuf>,
    /// What the device budget streams, when something does (one line).
    pub device_budget: Option<String>,
}
