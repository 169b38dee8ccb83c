//! The command-line face of [`ServeConfig`]: clap argument groups that `fastvideo serve`, the
//! other `fastvideo` commands and the Dynamo worker flatten into their own arguments. Every flag
//! is optional and overrides the config's field only when given, so the defaults live in one
//! place ([`ServeConfig`]'s `Default`), whether the config came from a file or not.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use clap::Args;
use fastvideo_engine::Policy;
use fastvideo_models::{LoadedModel, ModelKind};
use fastvideo_parallel::ParallelMode;
use fastvideo_torch::{DtypeChoice, Precision};
use tch::Device;

use crate::config::{Drain, ModelConfig, RestartJobs, ServeConfig};

fn set<T: Clone>(field: &mut T, flag: &Option<T>) {
    if let Some(v) = flag {
        field.clone_from(v);
    }
}

fn set_opt<T: Clone>(field: &mut Option<T>, flag: &Option<T>) {
    if flag.is_some() {
        field.clone_from(flag);
    }
}

/// Compute dtypes and kernels, shared by every command that loads a model.
#[derive(Args, Clone, Debug, Default)]
pub struct PrecisionArgs {
    /// Precision preset: exact (fp32, no lossy path), bf16, or fast (bf16 plus the options that
    /// passed the quality gate: on Hopper GPUs 8-bit attention with e4m3 P·V for generation
    /// models, with f16 P·V for world models; the tiny decoder for world sessions) [default:
    /// auto, bf16 on CUDA and exact elsewhere].
    #[arg(long)]
    pub precision: Option<Precision>,
    /// Transformer and text-encoder dtype: auto (bf16 on CUDA, fp32 on CPU), bf16, fp16 or fp32
    /// [default: auto].
    #[arg(long)]
    pub dtype: Option<DtypeChoice>,
    /// VAE dtype: auto (measured best on CUDA, fp32 on CPU), bf16, fp16 or fp32 [default: auto].
    #[arg(long)]
    pub vae_dtype: Option<DtypeChoice>,
    /// Fused CUDA kernels (`on`) or plain libtorch ops everywhere (`off`) [default: on].
    #[arg(long, value_parser = ["on", "off"])]
    pub kernels: Option<String>,
    /// Two-expert models (Wan 2.2 A14B): keep one expert on the device, the other in pinned host
    /// memory, swapped when a step needs it.
    #[arg(long)]
    pub offload_experts: bool,
    /// World sessions decode with the world folder's tiny_vae/ (a fraction of the VAE's cost,
    /// approximately the same frames).
    #[arg(long)]
    pub tiny_decoder: bool,
    /// FP8 linears in the inner transformer blocks (lossy, about 6 % faster on an H200; not in
    /// `--precision fast`: it missed the quality gate, docs/benchmarks.md).
    #[arg(long)]
    pub fp8_linears: bool,
    /// 8-bit self-attention (INT8 Q·Kᵀ, FP8 P·V; lossy; what --precision fast runs on generation
    /// models) on Hopper GPUs; SDPA on other GPUs (docs/benchmarks.md).
    #[arg(long, conflicts_with = "int8_qk_attention")]
    pub int8_attention: bool,
    /// 8-bit self-attention with INT8 Q·Kᵀ only (P·V in f16; lossy, closer to exact and slower
    /// than --int8-attention; what --precision fast runs on world models) on Hopper GPUs; SDPA
    /// on other GPUs (docs/benchmarks.md).
    #[arg(long)]
    pub int8_qk_attention: bool,
    /// The prompt rewriter for requests with `prompt_extend` (a transformers-layout Qwen3 or
    /// Qwen2.5 folder; its `system_prompt.txt`, if any, is the system turn) [default: the
    /// model folder's `prompt_extender/`, which the shipped default model has].
    #[arg(long, value_name = "DIR")]
    pub prompt_extender: Option<PathBuf>,
    /// The transformer's weights from one safetensors file in the original release's layout
    /// (Wan's `blocks.0.self_attn.q.weight`, bare or under ComfyUI's `model.diffusion_model.`)
    /// or diffusers' names, in place of the folder's; the folder gives the config and the rest.
    #[arg(long, value_name = "FILE")]
    pub transformer: Option<PathBuf>,
    /// Device memory the model may take, weights and activations (`24G`, `20GiB`, bytes): the
    /// text encoder's layers and the last transformer blocks that do not fit stream from
    /// pinned host memory, overlapped with compute [default: stream only when the weights
    /// exceed the GPU's free memory].
    #[arg(long, value_name = "SIZE", value_parser = crate::size::parse_size)]
    pub max_device_memory: Option<u64>,
}

impl PrecisionArgs {
    /// Writes the flags given into `m`, over what a config file said.
    pub fn apply(&self, m: &mut ModelConfig) {
        set(&mut m.precision, &self.precision);
        set(&mut m.dtype, &self.dtype);
        set(&mut m.vae_dtype, &self.vae_dtype);
        if let Some(k) = &self.kernels {
            m.kernels = k == "on";
        }
        m.offload_experts |= self.offload_experts;
        m.tiny_decoder |= self.tiny_decoder;
        m.fp8_linears |= self.fp8_linears;
        m.int8_attention |= self.int8_attention;
        m.int8_qk_attention |= self.int8_qk_attention;
        set_opt(&mut m.prompt_extender, &self.prompt_extender);
        set_opt(&mut m.transformer, &self.transformer);
        set_opt(&mut m.max_device_memory, &self.max_device_memory);
    }

    /// The default model config with these flags applied.
    pub fn model_config(&self) -> ModelConfig {
        let mut m = ModelConfig::default();
        self.apply(&mut m);
        m
    }

    /// Loads the folder `dir` as a model of `kind` with these dtypes and kernels, through the
    /// registry; errors name `--model` and the folder.
    pub fn load(&self, dir: &Path, kind: ModelKind, device: Device) -> anyhow::Result<Box<dyn LoadedModel>> {
        let loaded = self.model_config().load_model(dir, kind, device, false);
        anyhow::Context::with_context(loaded, || format!("--model {}", dir.display()))
    }
}

/// Several GPUs for one model.
#[derive(Args, Clone, Debug, Default)]
pub struct ParallelArgs {
    /// GPUs to split each denoising step over (rank 0 is --device, the others follow it)
    /// [default: 1].
    #[arg(long)]
    pub gpus: Option<usize>,
    /// How the GPUs split a step: cfg (the two guidance branches side by side), sp (the token
    /// sequence, Ulysses) or cfg+sp.
    #[arg(long)]
    pub parallel: Option<ParallelMode>,
}

impl ParallelArgs {
    /// Writes the flags given into `m`, over what a config file said.
    pub fn apply(&self, m: &mut ModelConfig) {
        set(&mut m.gpus, &self.gpus);
        set_opt(&mut m.parallel, &self.parallel);
    }
}

/// What the engine serves and how it schedules: the part of `serve` the Dynamo worker shares.
#[derive(Args, Clone, Debug, Default)]
pub struct EngineArgs {
    /// A serve config (TOML, see docs/operators.md); flags given beside it override its fields.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Diffusers-layout Wan folder, or NAME=FOLDER to serve it as NAME; repeatable: the first is
    /// the primary model (requests without `model` run on it), the others are served beside it
    /// on the same engine. The shipped default model when omitted.
    #[arg(long)]
    pub model: Vec<String>,
    /// The model name clients ask for (`model` in requests, `/v1/models`) [default: the
    /// folder's name, or fastvideo-default].
    #[arg(long, alias = "name")]
    pub model_name: Option<String>,
    /// Deploy config enabling plugins by hash (see docs/plugins.md).
    #[arg(long)]
    pub deploy: Option<PathBuf>,
    /// auto, cpu, cuda or cuda:N [default: auto].
    #[arg(long)]
    pub device: Option<String>,
    /// Dtypes, kernels and lossy options of the model.
    #[command(flatten)]
    pub precision: PrecisionArgs,
    /// How the model splits over several GPUs.
    #[command(flatten)]
    pub parallel: ParallelArgs,
    /// shortest_remaining (step-level; short jobs overtake long ones) or fifo (request-level)
    /// [default: shortest_remaining].
    #[arg(long)]
    pub policy: Option<Policy>,
    /// Requests holding state at once [default: 16].
    #[arg(long)]
    pub max_active: Option<usize>,
    /// Requests admitted (queued or running) at once; more get HTTP 429 [default: 1024].
    #[arg(long)]
    pub max_queue: Option<usize>,
    /// Memory the active requests may hold together, in MiB (admission refuses larger requests).
    /// Default: 8192 on CPU; on CUDA, 90 % of the device memory free once the model is loaded.
    #[arg(long)]
    pub memory_mib: Option<u64>,
    /// Most requests whose compatible denoise steps run as one batched forward (1: never
    /// batch). Default: 8 on CUDA, 1 on CPU, where batching measured slower (docs/benchmarks.md).
    #[arg(long)]
    pub max_batch: Option<usize>,
    /// Most tokens one packed denoise step may hold, for models that pack requests of different
    /// sizes by token count (image models: FLUX.2). Default: 65536.
    #[arg(long)]
    pub max_batch_tokens: Option<u64>,
    /// Refuse requests predicted to take longer than this many seconds.
    #[arg(long)]
    pub max_request_seconds: Option<f64>,
    /// A job in the server longer than this many times its predicted solo time is overdue:
    /// overdue jobs get --overdue-share of the executor while other jobs wait too, so a long job
    /// behind a stream of short ones still finishes (docs/operators.md). 0: off [default: 3].
    #[arg(long)]
    pub max_stretch: Option<f64>,
    /// The share of the executor (0 to 1) overdue jobs get while others wait too [default: 0.5].
    #[arg(long)]
    pub overdue_share: Option<f64>,
    /// Served models whose transformer may be on the device at once (the world model counts as
    /// one while it may sleep): work on another first puts the least recently used idle one to
    /// sleep [default: all].
    #[arg(long)]
    pub max_resident_models: Option<usize>,
    /// A served model (by name) that never sleeps, whatever --max-resident-models says;
    /// repeatable (the primary never sleeps anyway).
    #[arg(long, value_name = "NAME")]
    pub pin_model: Vec<String>,
    /// A served model (by name) loaded lazily: its transformer is read only when a request
    /// first needs it; repeatable (not the primary).
    #[arg(long, value_name = "NAME")]
    pub lazy_model: Vec<String>,
    /// Device memory for served models' transformer weights, in MiB (every video model's and
    /// the world model's, the ones that never sleep included): models that may sleep load
    /// lazily and are read at start only while they fit, and work on a sleeping model first puts
    /// the least recently used idle ones to sleep until it fits [default: no bound].
    #[arg(long, value_name = "MIB")]
    pub weight_budget_mib: Option<u64>,
    /// Where sleeping models' transformer weights wait: `host` (pinned host memory; a wake is a
    /// copy) or `disk` (freed; a wake reads the checkpoint again) [default: host].
    #[arg(long, value_parser = ["host", "disk"])]
    pub sleep_to: Option<String>,
    /// Also run live world-model sessions (`/v1/sessions`): a world-model folder, or
    /// `default` for the shipped `models/world`.
    #[arg(long)]
    pub world: Option<String>,
    /// Live sessions at once (the key/value pool is sized for them); more get HTTP 429
    /// [default: 4].
    #[arg(long)]
    pub max_sessions: Option<usize>,
    /// Seconds a session may go without a stream or an action before it is closed [default: 60].
    #[arg(long)]
    pub session_idle: Option<u64>,
    /// The share of the executor that waiting jobs keep when more sessions run than the machine
    /// can keep at their frame rate (0 to 1; 0: sessions first, always) [default: 0.25].
    #[arg(long)]
    pub job_floor: Option<f64>,
    /// Device memory for prepared LoRA adapters, in MiB; the least recently used are dropped
    /// beyond it and read again when named [default: 2048].
    #[arg(long, value_name = "MIB")]
    pub adapter_cache: Option<u64>,
    /// LoRA adapters one request may name [default: 8].
    #[arg(long)]
    pub max_loras_per_request: Option<usize>,
    /// Also serve a language model (a transformers-layout Qwen3 or Qwen2.5 folder) on the same
    /// engine, for `/v1/chat/completions` and `/v1/completions`.
    #[arg(long)]
    pub lm: Option<PathBuf>,
    /// The language model's key/value cache (bytes, or 512M, 2G): paged blocks all its requests
    /// share [default: 1G].
    #[arg(long, value_parser = crate::size::parse_size)]
    pub lm_kv_cache: Option<u64>,
}

impl EngineArgs {
    /// The config file's contents (or the defaults), with every given flag applied over it.
    pub fn config(&self) -> anyhow::Result<ServeConfig> {
        let mut cfg = match &self.config {
            Some(path) => ServeConfig::load(path)?,
            None => ServeConfig::default(),
        };
        self.apply(&mut cfg);
        for (flag, names) in [("--pin-model", &self.pin_model), ("--lazy-model", &self.lazy_model)] {
            if let Some(name) = names.iter().find(|n| !cfg.models.iter().any(|m| &m.name == *n)) {
                anyhow::bail!("{flag} `{name}`: no model of that name is served beside the primary (--model NAME=DIR)");
            }
        }
        Ok(cfg)
    }

    /// Writes the flags given into `cfg`, over what a config file said (`--model` entries after the
    /// first become `models`).
    pub fn apply(&self, cfg: &mut ServeConfig) {
        set_opt(&mut cfg.deploy, &self.deploy);
        let m = &mut cfg.model;
        for (i, spec) in self.model.iter().enumerate() {
            let (name, path) = crate::config::NamedModel::parse(spec);
            if i == 0 {
                m.path = Some(path);
                if name.is_some() {
                    m.name = name;
                }
            } else {
                let name = name.unwrap_or_else(|| crate::config::folder_name(&path));
                cfg.models.push(crate::config::NamedModel { name, path, pin: false, lazy: false });
            }
        }
        let m = &mut cfg.model;
        set_opt(&mut m.name, &self.model_name);
        set(&mut m.device, &self.device);
        self.precision.apply(m);
        self.parallel.apply(m);
        let s = &mut cfg.scheduler;
        set(&mut s.policy, &self.policy);
        set(&mut s.max_active, &self.max_active);
        set(&mut s.max_queue, &self.max_queue);
        set_opt(&mut s.memory_mib, &self.memory_mib);
        set_opt(&mut s.max_batch, &self.max_batch);
        set_opt(&mut s.max_batch_tokens, &self.max_batch_tokens);
        set_opt(&mut s.max_request_seconds, &self.max_request_seconds);
        set(&mut s.max_stretch, &self.max_stretch);
        set(&mut s.overdue_share, &self.overdue_share);
        set_opt(&mut s.max_resident_models, &self.max_resident_models);
        if let Some(t) = &self.sleep_to {
            s.sleep_to = if t == "disk" { crate::config::SleepTier::Disk } else { crate::config::SleepTier::Host };
        }
        set_opt(&mut s.weight_budget_mib, &self.weight_budget_mib);
        for m in cfg.models.iter_mut() {
            m.pin |= self.pin_model.contains(&m.name);
            m.lazy |= self.lazy_model.contains(&m.name);
        }
        let w = &mut cfg.world;
        set_opt(&mut w.model, &self.world);
        set(&mut w.max_sessions, &self.max_sessions);
        set(&mut w.idle_seconds, &self.session_idle);
        set(&mut w.job_floor, &self.job_floor);
        set(&mut cfg.adapters.cache_mib, &self.adapter_cache);
        set(&mut cfg.adapters.max_per_request, &self.max_loras_per_request);
        set_opt(&mut cfg.lm.path, &self.lm);
        set(&mut cfg.lm.kv_cache, &self.lm_kv_cache);
    }
}

/// The HTTP server's own options: listener, drain, WebRTC, keys, storage.
#[derive(Args, Clone, Debug, Default)]
pub struct ServerArgs {
    /// Address to listen on [default: 127.0.0.1].
    #[arg(long)]
    pub host: Option<IpAddr>,
    /// 0 picks a free port (printed at start) [default: 8000].
    #[arg(long)]
    pub port: Option<u16>,
    /// On SIGTERM: `finish` admitted jobs, or `cancel` them [default: finish].
    #[arg(long, value_parser = ["finish", "cancel"])]
    pub drain: Option<String>,
    /// Seconds to wait for admitted jobs during a drain [default: 300].
    #[arg(long)]
    pub drain_timeout: Option<u64>,
    /// Seconds a client has to send a request's head (method, path, headers); a connection that
    /// has not finished by then is closed [default: 10].
    #[arg(long)]
    pub header_timeout: Option<u64>,
    /// Seconds a client has to send a request's body once its head is in (408 after) [default: 30].
    #[arg(long)]
    pub body_timeout: Option<u64>,
    /// Connections served at once; more wait to be accepted [default: 1024].
    #[arg(long)]
    pub max_connections: Option<usize>,
    /// Address WebRTC peers bind their UDP sockets to; it is the host candidate clients connect
    /// to, so it must be reachable by them. Default: --host, or 127.0.0.1 when --host is 0.0.0.0.
    #[arg(long)]
    pub webrtc_bind: Option<IpAddr>,
    /// A STUN or TURN server for WebRTC peers (repeatable): stun:HOST:PORT or
    /// turn:USER:PASS@HOST:PORT.
    #[arg(long = "webrtc-ice")]
    pub webrtc_ice: Vec<String>,
    /// Seconds a WebRTC peer may take to connect after the answer; then its session is closed
    /// [default: 10].
    #[arg(long)]
    pub webrtc_connect_timeout: Option<u64>,
    /// An API key clients must send as `Authorization: Bearer KEY` (repeatable); without any,
    /// the server is open to whoever reaches its port.
    #[arg(long = "api-key")]
    pub api_keys: Vec<String>,
    /// A file of API keys, one per line (blank lines and `#` comments skipped); keeps keys out of
    /// the process list.
    #[arg(long)]
    pub api_key_file: Option<PathBuf>,
    /// Serve `/metrics` without a key even when keys are set.
    #[arg(long)]
    pub metrics_public: bool,
    /// The highest `priority` a request may ask for, unless its key names its own bound
    /// (`--api-key "KEY max_priority=N"`) [default: 0].
    #[arg(long, allow_hyphen_values = true)]
    pub max_priority: Option<i32>,
    /// Where jobs and their videos are kept, so a restart (even a crash) loses no finished
    /// work. Default: fastvideo/ in the user's data directory (~/.local/share on Linux).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Keep jobs in memory only: a restart forgets them.
    #[arg(long, conflicts_with = "data_dir")]
    pub ephemeral: bool,
    /// Seconds a finished video is kept (its `expires_at`); then it is deleted. 0: until
    /// deleted by a client [default: 86400].
    #[arg(long)]
    pub job_ttl: Option<u64>,
    /// Space the kept videos may take (bytes, or with K, M, G or T: 512M, 20G); new jobs get
    /// HTTP 507 once they take it. 0: no budget [default: 20G].
    #[arg(long, value_parser = crate::size::parse_size)]
    pub disk_budget: Option<u64>,
    /// After a restart, jobs that were queued or running are run again (`requeue`, same seed)
    /// or marked failed with `server_restarted` (`fail`) [default: requeue].
    #[arg(long, value_parser = ["requeue", "fail"])]
    pub restart_jobs: Option<String>,
    /// Where prompts from ComfyUI clients write their outputs and uploads go (`output/`,
    /// `input/`). Default: comfyui/ in the data directory (a temporary folder with --ephemeral).
    #[arg(long)]
    pub comfy_dir: Option<PathBuf>,
    /// A URL prefix a request's `webhook` may point under (repeatable): scheme, host, port and
    /// path prefix, e.g. https://hooks.example.com/fastvideo. Without one, no webhooks.
    #[arg(long = "webhook-allow")]
    pub webhook_allow: Vec<String>,
    /// The file of the `whsec_…` secret webhook deliveries are signed with (Standard Webhooks).
    #[arg(long)]
    pub webhook_secret_file: Option<PathBuf>,
    /// Hours a failing webhook delivery is retried after its job ended [default: 24].
    #[arg(long)]
    pub webhook_retry_hours: Option<u64>,
}

impl ServerArgs {
    /// Writes the flags given into `cfg`'s `[http]`, `[webrtc]`, `[auth]`, `[storage]` and
    /// `[webhooks]` sections, over what a config file said.
    pub fn apply(&self, cfg: &mut ServeConfig) {
        let h = &mut cfg.http;
        set(&mut h.host, &self.host);
        set(&mut h.port, &self.port);
        if let Some(d) = &self.drain {
            h.drain = if d == "cancel" { Drain::Cancel } else { Drain::Finish };
        }
        set(&mut h.drain_timeout, &self.drain_timeout);
        set(&mut h.header_timeout, &self.header_timeout);
        set(&mut h.body_timeout, &self.body_timeout);
        set(&mut h.max_connections, &self.max_connections);
        set_opt(&mut cfg.webrtc.bind, &self.webrtc_bind);
        cfg.webrtc.ice.extend(self.webrtc_ice.iter().cloned());
        set(&mut cfg.webrtc.connect_timeout, &self.webrtc_connect_timeout);
        cfg.auth.api_keys.extend(self.api_keys.iter().cloned());
        set_opt(&mut cfg.auth.api_key_file, &self.api_key_file);
        cfg.auth.metrics_public |= self.metrics_public;
        set(&mut cfg.auth.max_priority, &self.max_priority);
        let s = &mut cfg.storage;
        if self.ephemeral {
            s.ephemeral = true;
            s.data_dir = None;
        }
        if self.data_dir.is_some() {
            s.ephemeral = false;
            s.data_dir.clone_from(&self.data_dir);
        }
        set(&mut s.job_ttl, &self.job_ttl);
        set(&mut s.disk_budget, &self.disk_budget);
        if let Some(r) = &self.restart_jobs {
            s.restart_jobs = if r == "fail" { RestartJobs::Fail } else { RestartJobs::Requeue };
        }
        set_opt(&mut s.comfy_dir, &self.comfy_dir);
        let w = &mut cfg.webhooks;
        w.allow.extend(self.webhook_allow.iter().cloned());
        set_opt(&mut w.secret_file, &self.webhook_secret_file);
        set(&mut w.retry_hours, &self.webhook_retry_hours);
    }
}
