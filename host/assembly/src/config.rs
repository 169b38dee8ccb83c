//! [`ServeConfig`]: everything a front end decides about an engine and its server, as one serde
//! value. `fastvideo serve --config serve.toml` reads it from a file; every flag of `serve` (and
//! of the Dynamo worker) is one field of it, so an option is added once, here, with its default.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use fastvideo_engine::Policy;
use fastvideo_parallel::ParallelMode;
use fastvideo_torch::{DtypeChoice, Precision};
use serde::{Deserialize, Serialize};

/// How one process serves: the model, how it runs, and (for `serve`) its HTTP face.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServeConfig {
    /// Deploy config enabling plugins by hash (see docs/plugins.md).
    pub deploy: Option<PathBuf>,
    /// The primary model (`[model]`).
    pub model: ModelConfig,
    /// Admission and the step scheduler (`[scheduler]`).
    pub scheduler: SchedulerConfig,
    /// Live world-model sessions (`[world]`).
    pub world: WorldConfig,
    /// The HTTP listener (`[http]`).
    pub http: HttpConfig,
    /// WebRTC peers of world sessions (`[webrtc]`).
    pub webrtc: WebRtcConfig,
    /// Bearer API keys (`[auth]`).
    pub auth: AuthConfig,
    /// Where jobs and videos are kept (`[storage]`).
    pub storage: StorageConfig,
    /// LoRA adapters requests may name (`[adapters]`).
    pub adapters: AdapterConfig,
    /// Completion webhooks (`[webhooks]`).
    pub webhooks: WebhookConfig,
    /// A language model served beside the video model (`[lm]`).
    pub lm: LmConfig,
    /// Video models served beside the primary one (`[[models]]`, or `--model NAME=DIR` after the
    /// first): a request names one in `model`.
    pub models: Vec<NamedModel>,
}

/// A model served beside the primary one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamedModel {
    /// What requests call it (`model`), listed in `/v1/models`.
    pub name: String,
    /// A diffusers-layout Wan folder.
    pub path: PathBuf,
    /// Never put to sleep (`max_resident_models` counts it, but it stays on the device).
    #[serde(default)]
    pub pin: bool,
    /// Loaded lazily: its transformer's weights are checked at start but read only when a
    /// request first needs them (it starts asleep). Not with `pin`.
    #[serde(default)]
    pub lazy: bool,
}

impl NamedModel {
    /// `NAME=DIR` (a name without `/`) or a bare `DIR`.
    pub fn parse(spec: &str) -> (Option<String>, PathBuf) {
        match spec.split_once('=') {
            Some((n, p)) if !n.is_empty() && !n.contains('/') && !p.is_empty() => {
                (Some(n.to_string()), PathBuf::from(p))
            }
            _ => (None, PathBuf::from(spec)),
        }
    }
}

/// A folder's last component, as a served model's default name.
pub fn folder_name(p: &Path) -> String {
    p.canonicalize()
        .unwrap_or_else(|_| p.to_path_buf())
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into())
}

/// A language model served beside the video model (`/v1/chat/completions`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LmConfig {
    /// A transformers-layout Qwen3 or Qwen2.5 folder; none: no language model.
    pub path: Option<PathBuf>,
    /// Its paged key/value cache: bytes, or 512M, 2G.
    #[serde(with = "crate::size::bytes")]
    pub kv_cache: u64,
}

impl Default for LmConfig {
    fn default() -> Self {
        Self { path: None, kv_cache: 1 << 30 }
    }
}

/// Completion webhooks: where requests' `webhook` URLs may point, and the signing secret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebhookConfig {
    /// URL prefixes deliveries may go to (scheme, host, port, path prefix); none: no webhooks.
    pub allow: Vec<String>,
    /// A file holding the `whsec_…` secret deliveries are signed with (required with `allow`).
    pub secret_file: Option<PathBuf>,
    /// Hours a failing delivery is retried after the job ended.
    pub retry_hours: u64,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        Self { allow: Vec::new(), secret_file: None, retry_hours: 24 }
    }
}

/// LoRA adapters (enabled by the deploy's `[[adapters]]`): their device cache and how many a
/// request may stack.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdapterConfig {
    /// Device memory for prepared adapters, in MiB; least recently used ones are dropped beyond.
    pub cache_mib: u64,
    /// Adapters one request may name.
    pub max_per_request: usize,
}

impl Default for AdapterConfig {
    fn default() -> Self {
        Self { cache_mib: 2048, max_per_request: fastvideo_pipeline::DEFAULT_MAX_LORAS_PER_REQUEST }
    }
}

/// Which model, on which device, in which dtypes, over how many GPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelConfig {
    /// Diffusers-layout Wan folder; the embedded default model when `None`.
    pub path: Option<PathBuf>,
    /// The name clients ask for (`model` in requests); the folder's name when `None`, or
    /// `fastvideo-default` for the embedded model.
    pub name: Option<String>,
    /// auto, cpu, cuda or cuda:N.
    pub device: String,
    /// Precision preset: auto (today's dtypes), exact (fp32, no lossy path), bf16, or fast (bf16
    /// plus the options that passed the quality gate: on Hopper GPUs 8-bit attention with e4m3
    /// P·V for generation models, with f16 P·V for world models; the tiny decoder for world
    /// sessions).
    /// docs/operators.md.
    #[serde(with = "from_str")]
    pub precision: Precision,
    /// Transformer and text-encoder dtype: auto (bf16 on CUDA, fp32 on CPU), bf16, fp16, fp32.
    #[serde(with = "from_str")]
    pub dtype: DtypeChoice,
    /// VAE dtype: auto (measured best on CUDA, fp32 on CPU), bf16, fp16 or fp32.
    #[serde(with = "from_str")]
    pub vae_dtype: DtypeChoice,
    /// Fused CUDA kernels, or plain libtorch ops everywhere.
    pub kernels: bool,
    /// GPUs each denoising step is split over (rank 0 is `device`).
    pub gpus: usize,
    /// How the GPUs split a step: cfg, sp or cfg+sp.
    #[serde(with = "from_str_opt")]
    pub parallel: Option<ParallelMode>,
    /// Two-expert models (Wan 2.2 A14B): one expert on the device at a time, the other in
    /// pinned host memory (half the transformers' device memory, a swap when the expert changes).
    pub offload_experts: bool,
    /// World sessions decode their chunks with the world folder's `tiny_vae/` (lossy, a fraction
    /// of the VAE's cost; docs/benchmarks.md) instead of its VAE; an error when it has none.
    /// `precision = fast` does the same where the folder has one.
    pub tiny_decoder: bool,
    /// FP8 linears in the inner transformer blocks (lossy; not part of `fast`: it did not pass
    /// the quality gate, docs/benchmarks.md). Refused with `precision = exact`.
    pub fp8_linears: bool,
    /// 8-bit self-attention (INT8 Q·Kᵀ, FP8 P·V; lossy; `precision = fast` implies it on
    /// generation models) where the GPU has the kernel (Hopper), SDPA on other GPUs. Refused
    /// with `precision = exact`.
    pub int8_attention: bool,
    /// 8-bit self-attention with INT8 Q·Kᵀ and f16 P·V (lossy, closer to exact than
    /// `int8_attention`; `precision = fast` implies it on world models), where the GPU has
    /// the kernel. Refused with `precision = exact`, and with `int8_attention` (one recipe per
    /// model).
    pub int8_qk_attention: bool,
    /// The prompt rewriter (a transformers-layout Qwen folder) requests with `prompt_extend`
    /// run before the text encoder; the model folder's `prompt_extender/` when it has one.
    pub prompt_extender: Option<PathBuf>,
    /// The transformer's weights from one safetensors file as the original release or ComfyUI
    /// publishes it (`--transformer`), in place of the folder's; the folder gives the rest.
    pub transformer: Option<PathBuf>,
    /// Device memory the model's weights and activations may take (`"24G"` or bytes): what
    /// does not fit streams from pinned host memory (`--max-device-memory`, docs/operators.md).
    /// `None`: on a GPU, streaming starts only when the weights exceed the free memory.
    #[serde(with = "crate::size::bytes_opt")]
    pub max_device_memory: Option<u64>,
}

impl Default for ModelConfig {
    fn default() -> Self {
        Self {
            path: None,
            name: None,
            device: "auto".into(),
            precision: Precision::Auto,
            dtype: DtypeChoice::Auto,
            vae_dtype: DtypeChoice::Auto,
            kernels: true,
            gpus: 1,
            parallel: None,
            offload_experts: false,
            tiny_decoder: false,
            fp8_linears: false,
            int8_attention: false,
            int8_qk_attention: false,
            prompt_extender: None,
            transformer: None,
            max_device_memory: None,
        }
    }
}

/// Admission and the step scheduler (docs/operators.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SchedulerConfig {
    /// shortest_remaining (step-level; short jobs overtake long ones) or fifo.
    pub policy: Policy,
    /// Requests holding state at once.
    pub max_active: usize,
    /// Requests admitted (queued or running) at once; more are refused (HTTP 429).
    pub max_queue: usize,
    /// Memory the active requests may hold together, in MiB. `None`: 8192 on CPU; on CUDA, 90 %
    /// of the device memory free once the model is loaded.
    pub memory_mib: Option<u64>,
    /// Most requests whose compatible steps run as one batched forward. `None`: 8 on CUDA, 1 on
    /// CPU, where batching measured slower (docs/benchmarks.md).
    pub max_batch: Option<usize>,
    /// Most tokens one packed step may hold (models that pack requests by token count).
    /// `None`: 65536.
    pub max_batch_tokens: Option<u64>,
    /// Refuse requests predicted to take longer than this many seconds.
    pub max_request_seconds: Option<f64>,
    /// A job in the server longer than this many times its predicted solo time is overdue. 0: off.
    pub max_stretch: f64,
    /// The share of the executor (0 to 1) overdue jobs get while others wait too.
    pub overdue_share: f64,
    /// Served models whose transformer weights may be on the device at once (the world model
    /// counts as one while it may sleep); work on another puts the least recently used idle one
    /// to sleep first. `None`: all.
    pub max_resident_models: Option<usize>,
    /// Where a sleeping model's transformer weights go: `host` (pinned host memory, kept: a wake
    /// is a copy) or `disk` (freed: a wake reads the model folder's checkpoint again).
    pub sleep_to: SleepTier,
    /// Device memory, in MiB, the transformer weights of every served video model and of the
    /// world model may take together; work on a sleeping model first puts the least recently
    /// used idle ones to sleep until it fits. The weights that never sleep (the primary, pinned
    /// models) count too. Under a budget, models that may sleep load lazily and are read at
    /// start only while they fit, so starting never exceeds it. `None`: no bound.
    pub weight_budget_mib: Option<u64>,
}

/// Where a sleeping model's weights wait ([`SchedulerConfig::sleep_to`]).
pub use fastvideo_models::SleepTier;

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            policy: Policy::ShortestRemaining,
            max_active: 16,
            max_queue: 1024,
            memory_mib: None,
            max_batch: None,
            max_batch_tokens: None,
            max_request_seconds: None,
            max_stretch: 3.0,
            overdue_share: 0.5,
            max_resident_models: None,
            sleep_to: SleepTier::Host,
            weight_budget_mib: None,
        }
    }
}

/// Live world-model sessions (`/v1/sessions`), off unless `model` is set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorldConfig {
    /// A world-model folder, or `default` for the shipped `models/world`.
    pub model: Option<String>,
    /// Live sessions at once (the key/value pool is sized for them); more get HTTP 429.
    pub max_sessions: usize,
    /// Seconds a session may go without a stream or an action before it is closed.
    pub idle_seconds: u64,
    /// The share of the executor that waiting jobs keep when sessions ask for all of it.
    pub job_floor: f64,
}

impl Default for WorldConfig {
    fn default() -> Self {
        Self { model: None, max_sessions: 4, idle_seconds: 60, job_floor: 0.25 }
    }
}

/// What happens to admitted work on SIGTERM.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Drain {
    /// Let queued and running jobs finish.
    #[default]
    Finish,
    /// Cancel them.
    Cancel,
}

/// The HTTP listener.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// Address to listen on.
    pub host: IpAddr,
    /// 0 picks a free port (printed at start).
    pub port: u16,
    /// What a SIGTERM does to admitted work.
    pub drain: Drain,
    /// Seconds to wait for admitted jobs during a drain.
    pub drain_timeout: u64,
    /// Seconds a client has to send a request's head.
    pub header_timeout: u64,
    /// Seconds a client has to send a request's body once its head is in (408 after).
    pub body_timeout: u64,
    /// Connections served at once; more wait to be accepted.
    pub max_connections: usize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            host: IpAddr::from([127, 0, 0, 1]),
            port: 8000,
            drain: Drain::Finish,
            drain_timeout: 300,
            header_timeout: 10,
            body_timeout: 30,
            max_connections: 1024,
        }
    }
}

/// WebRTC peers of world sessions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebRtcConfig {
    /// Address peers bind their UDP sockets to. `None`: `http.host`, or 127.0.0.1 when that is
    /// 0.0.0.0.
    pub bind: Option<IpAddr>,
    /// STUN or TURN servers: `stun:HOST:PORT` or `turn:USER:PASS@HOST:PORT`.
    pub ice: Vec<String>,
    /// Seconds a peer may take to connect after the answer.
    pub connect_timeout: u64,
}

impl Default for WebRtcConfig {
    fn default() -> Self {
        Self { bind: None, ice: Vec::new(), connect_timeout: 10 }
    }
}

/// Bearer API keys.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// `KEY`, or `KEY max_priority=N` to let that key's requests ask for priorities up to N.
    pub api_keys: Vec<String>,
    /// The highest `priority` a request may ask for when its key names no bound (and on a
    /// server without keys).
    pub max_priority: i32,
    /// A file of keys, one per line (blank lines and `#` comments skipped).
    pub api_key_file: Option<PathBuf>,
    /// Serve `/metrics` without a key even when keys are set.
    pub metrics_public: bool,
}

/// What happens to jobs after a restart.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RestartJobs {
    /// Run queued and running jobs again (same seed).
    #[default]
    Requeue,
    /// Mark them failed with `server_restarted`.
    Fail,
}

/// Where jobs, videos and ComfyUI files are kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageConfig {
    /// Default: fastvideo/ in the user's data directory (~/.local/share on Linux).
    pub data_dir: Option<PathBuf>,
    /// Keep jobs in memory only: a restart forgets them.
    pub ephemeral: bool,
    /// Seconds a finished video is kept; 0: until deleted.
    pub job_ttl: u64,
    /// Space the kept videos may take: bytes, or 512M, 20G; 0: no budget.
    #[serde(with = "crate::size::bytes")]
    pub disk_budget: u64,
    /// What happens to unfinished jobs after a restart.
    pub restart_jobs: RestartJobs,
    /// ComfyUI outputs and uploads. Default: comfyui/ in the data directory.
    pub comfy_dir: Option<PathBuf>,
}

impl Default for StorageConfig {
    fn default() -> Self {
        Self {
            data_dir: None,
            ephemeral: false,
            job_ttl: 86_400,
            disk_budget: 20 << 30,
            restart_jobs: RestartJobs::Requeue,
            comfy_dir: None,
        }
    }
}

impl ServeConfig {
    /// Reads a TOML file; relative paths in it are relative to the file's folder. Errors name
    /// the file and the key.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("--config: reading {}", path.display()))?;
        let mut cfg: Self = toml::from_str(&text).map_err(|e| {
            // One line: the key's line and toml's message (its own text spans several lines).
            let at = e
                .span()
                .map(|s| {
                    let n = text[..s.start].matches('\n').count();
                    format!(" line {} `{}`:", n + 1, text.lines().nth(n).unwrap_or("").trim())
                })
                .unwrap_or_default();
            anyhow::anyhow!("--config {}:{at} {}", path.display(), e.message().trim())
        })?;
        cfg.rebase(path.parent().unwrap_or(Path::new(".")));
        Ok(cfg)
    }

    /// Makes every relative path absolute against `dir`.
    fn rebase(&mut self, dir: &Path) {
        let join = |p: &mut Option<PathBuf>| {
            if let Some(q) = p.as_mut().filter(|q| q.is_relative()) {
                *q = dir.join(&*q);
            }
        };
        join(&mut self.deploy);
        join(&mut self.model.path);
        join(&mut self.model.transformer);
        join(&mut self.auth.api_key_file);
        join(&mut self.storage.data_dir);
        join(&mut self.storage.comfy_dir);
        join(&mut self.webhooks.secret_file);
        join(&mut self.lm.path);
        for m in &mut self.models {
            if m.path.is_relative() {
                m.path = dir.join(&m.path);
            }
        }
        if let Some(w) = self.world.model.as_mut().filter(|w| *w != "default" && Path::new(w).is_relative()) {
            *w = dir.join(&*w).display().to_string();
        }
    }

    /// Checks what can be checked without loading anything; each error names the field (as
    /// the config file spells it, with the `serve` flag beside it).
    pub fn validate(&self) -> Result<()> {
        let s = &self.scheduler;
        if s.max_resident_models == Some(0) {
            bail!("scheduler.max_resident_models (--max-resident-models) must be at least 1");
        }
        if s.weight_budget_mib == Some(0) {
            bail!("scheduler.weight_budget_mib (--weight-budget-mib) must be at least 1");
        }
        if let Some(m) = self.models.iter().find(|m| m.lazy && m.pin) {
            bail!("models `{}`: `lazy` (--lazy-model) and `pin` (--pin-model) exclude each other", m.name);
        }
        if s.max_active == 0 || s.max_queue == 0 || s.max_batch == Some(0) || s.max_batch_tokens == Some(0) {
            bail!(
                "scheduler.max_active, max_queue, max_batch and max_batch_tokens (--max-active, --max-queue, \
                 --max-batch, --max-batch-tokens) must be positive"
            );
        }
        if s.max_stretch.is_nan() || (s.max_stretch != 0.0 && s.max_stretch < 1.0) {
            bail!(
                "scheduler.max_stretch (--max-stretch): {} must be at least 1 (a multiple of a job's solo time), or 0 for off",
                s.max_stretch
            );
        }
        if !(s.overdue_share > 0.0 && s.overdue_share <= 1.0) {
            bail!(
                "scheduler.overdue_share (--overdue-share): {} is not a share above 0 and at most 1",
                s.overdue_share
            );
        }
        if !(0.0..=1.0).contains(&self.world.job_floor) {
            bail!("world.job_floor (--job-floor): {} is not a share between 0 and 1", self.world.job_floor);
        }
        if let Some(t) = s.max_request_seconds.filter(|t| t.is_nan() || *t <= 0.0) {
            bail!("scheduler.max_request_seconds (--max-request-seconds): {t} is not a positive number of seconds");
        }
        if self.storage.ephemeral && self.storage.data_dir.is_some() {
            bail!("storage.ephemeral (--ephemeral) and storage.data_dir (--data-dir) exclude each other");
        }
        let mut names = std::collections::HashSet::new();
        for m in &self.models {
            if m.name.is_empty() || !names.insert(m.name.as_str()) {
                bail!("models: `{}` is empty or named twice (each served model needs its own name)", m.name);
            }
        }
        if self.auth.max_priority < fastvideo_server::MIN_PRIORITY {
            bail!(
                "auth.max_priority (--max-priority): {} is below {}",
                self.auth.max_priority,
                fastvideo_server::MIN_PRIORITY
            );
        }
        let w = &self.webhooks;
        fastvideo_server::WebhookPolicy::new(&w.allow).map_err(|e| anyhow::anyhow!("webhooks.allow: {e}"))?;
        if !w.allow.is_empty() && w.secret_file.is_none() {
            bail!(
                "webhooks.secret_file (--webhook-secret-file): deliveries are signed; give the file of a whsec_ secret"
            );
        }
        if w.retry_hours == 0 {
            bail!("webhooks.retry_hours (--webhook-retry-hours): must be at least 1");
        }
        for ice in &self.webrtc.ice {
            fastvideo_server::RtcConfig::parse_ice_server(ice)
                .map_err(|e| anyhow::anyhow!("webrtc.ice (--webrtc-ice): {e}"))?;
        }
        Ok(())
    }
}

/// Fields stored as their `FromStr`/`Display` text (`"bf16"`, `"cfg+sp"`).
mod from_str {
    use std::fmt::Display;
    use std::str::FromStr;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<T: Display, S: Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(v)
    }

    pub fn deserialize<'de, T: FromStr<Err = String>, D: Deserializer<'de>>(d: D) -> Result<T, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

mod from_str_opt {
    use std::fmt::Display;
    use std::str::FromStr;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<T: Display, S: Serializer>(v: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => s.collect_str(v),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, T: FromStr<Err = String>, D: Deserializer<'de>>(d: D) -> Result<Option<T>, D::Error> {
        Option::<String>::deserialize(d)?.map(|t| t.parse().map_err(serde::de::Error::custom)).transpose()
    }
}
