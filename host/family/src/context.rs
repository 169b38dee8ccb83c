//! What a family's `load` is asked for.

use fastvideo_parallel::ParallelMode;
use fastvideo_torch::Numerics;
use tch::Device;

/// The role a folder fills in a deployment; a family serves one or more of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelKind {
    /// Generates media from a request (`--model`, `[[models]]`): the job routes.
    Generation,
    /// Rolls out interactive sessions chunk by chunk (`[world]`).
    World,
    /// Decodes tokens for chats (`[lm]`).
    Language,
}

impl ModelKind {
    /// How operators name the role (in errors and listings).
    pub fn describe(self) -> &'static str {
        match self {
            ModelKind::Generation => "a generation model (--model)",
            ModelKind::World => "a world model ([world])",
            ModelKind::Language => "a language model ([lm])",
        }
    }
}

/// Where a sleeping model's weights wait.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SleepTier {
    /// Pinned host memory.
    #[default]
    Host,
    /// Nowhere: read from disk again on waking.
    Disk,
}

/// How to load: the device, the numerics (a precision preset already turned into dtypes and
/// options by [`Family::implies`](crate::Family::implies)) and the layout.
#[derive(Debug, Clone)]
pub struct LoadContext {
    /// The device the model runs on (rank 0 when split over GPUs).
    pub device: Device,
    /// Dtypes and lossy options.
    pub numerics: Numerics,
    /// The folder's tiny decoder asked for explicitly (families without one refuse it).
    pub tiny_decoder: bool,
    /// Two-expert models keep one expert on the device at a time.
    pub offload_experts: bool,
    /// The large weights are checked but read only at the first wake (a model that may sleep).
    pub lazy: bool,
    /// GPUs each step is split over, and how.
    pub gpus: usize,
    /// How the GPUs split a step (`None`: the family's choice).
    pub parallel: Option<ParallelMode>,
    /// Bytes of the key/value cache of token-decoding models.
    pub kv_cache_bytes: u64,
    /// `--transformer FILE`: the transformer's weights from one file in the format its
    /// original release publishes (families that read one; the others refuse it).
    pub transformer: Option<std::path::PathBuf>,
    /// `--max-device-memory`: bytes the model may take on the device; families that stream
    /// weights from host memory plan by it, the others refuse it.
    pub max_device_memory: Option<u64>,
}

impl LoadContext {
    /// One device, the numerics given, nothing else asked.
    pub fn new(device: Device, numerics: Numerics) -> Self {
        Self {
            device,
            numerics,
            tiny_decoder: false,
            offload_experts: false,
            lazy: false,
            gpus: 1,
            parallel: None,
            kv_cache_bytes: 1 << 30,
            transformer: None,
            max_device_memory: None,
        }
    }
}

impl LoadContext {
    /// Refuses what a family of one transformer on one GPU, without FP8 linears, a tiny
    /// decoder or streamed weights, cannot honour, naming the option (`family` names the model
    /// in the message).
    pub fn one_gpu_plain(&self, family: &str) -> anyhow::Result<()> {
        anyhow::ensure!(self.gpus <= 1, "{family} runs on one GPU here (--gpus {} asked)", self.gpus);
        anyhow::ensure!(!self.numerics.fp8_linears, "{family} has no FP8 linears yet (--fp8-linears)");
        anyhow::ensure!(!self.tiny_decoder, "{family} folders have no tiny decoder");
        anyhow::ensure!(!self.offload_experts, "{family} has one transformer (--offload-experts)");
        self.no_device_budget(family)
    }

    /// Refuses `--max-device-memory` for a family that streams no weights from host memory yet.
    pub fn no_device_budget(&self, family: &str) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.max_device_memory.is_none(),
            "{family} does not stream weights from host memory yet (--max-device-memory): it loads whole onto the \
             device"
        );
        Ok(())
    }

    /// Refuses `--transformer` for a family that reads no single file yet.
    pub fn no_single_file(&self, family: &str) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.transformer.is_none(),
            "{family} reads no single-file transformer yet (--transformer): give a diffusers folder"
        );
        Ok(())
    }
}
