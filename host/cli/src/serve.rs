//! `fastvideo serve`: the model behind the OpenAI-compatible HTTP API (see docs/api.md).

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use fastvideo_engine::{Engine, EngineConfig, EngineModel, Metrics, Policy};
use fastvideo_plugin_host::{Binding, Deployment};
use fastvideo_server::{AppState, DrainMode, ServerConfig};
use fastvideo_wan::pipeline;

#[derive(Args)]
pub struct ServeArgs {
    /// Diffusers-layout Wan folder; the default model when omitted.
    #[arg(long)]
    model: Option<PathBuf>,
    /// Deploy config enabling plugins by hash (see docs/plugins.md).
    #[arg(long)]
    deploy: Option<PathBuf>,
    /// auto, cpu, cuda or cuda:N.
    #[arg(long, default_value = "auto")]
    device: String,
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    /// 0 picks a free port (printed at start).
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// shortest_remaining (step-level; short jobs overtake long ones) or fifo (request-level).
    #[arg(long, default_value = "shortest_remaining")]
    policy: Policy,
    /// Requests holding state at once.
    #[arg(long, default_value_t = 16)]
    max_active: usize,
    /// Requests admitted (queued or running) at once; more get HTTP 429.
    #[arg(long, default_value_t = 1024)]
    max_queue: usize,
    /// Memory the active requests may hold together, in MiB (admission refuses larger requests).
    /// Default: 8192 on CPU; on CUDA, 90 % of the device memory free once the model is loaded.
    #[arg(long)]
    memory_mib: Option<u64>,
    /// Most requests whose compatible denoise steps run as one batched forward (1: never
    /// batch). Default: 8 on CUDA, 1 on CPU, where batching measured slower (docs/benchmarks.md).
    #[arg(long)]
    max_batch: Option<usize>,
    /// Refuse requests predicted to take longer than this many seconds.
    #[arg(long)]
    max_request_seconds: Option<f64>,
    /// On SIGTERM: `finish` admitted jobs, or `cancel` them.
    #[arg(long, default_value = "finish", value_parser = ["finish", "cancel"])]
    drain: String,
    /// Seconds to wait for admitted jobs during a drain.
    #[arg(long, default_value_t = 300)]
    drain_timeout: u64,
    /// A job in the server longer than this many times its predicted solo time is overdue:
    /// overdue jobs get --overdue-share of the executor while other jobs wait too, so a long job
    /// behind a stream of short ones still finishes (docs/operators.md). 0: off.
    #[arg(long, default_value_t = 3.0)]
    max_stretch: f64,
    /// The share of the executor (0 to 1) overdue jobs get while others wait too.
    #[arg(long, default_value_t = 0.5)]
    overdue_share: f64,
    /// Seconds a client has to send a request's head (method, path, headers); a connection that
    /// has not finished by then is closed.
    #[arg(long, default_value_t = 10)]
    header_timeout: u64,
    /// Seconds a client has to send a request's body once its head is in (408 after).
    #[arg(long, default_value_t = 30)]
    body_timeout: u64,
    /// Connections served at once; more wait to be accepted.
    #[arg(long, default_value_t = 1024)]
    max_connections: usize,
    /// Also run live world-model sessions (`/v1/sessions`): a world-model folder, or
    /// `default` for the shipped `models/world`.
    #[arg(long)]
    world: Option<String>,
    /// Live sessions at once (the key/value pool is sized for them); more get HTTP 429.
    #[arg(long, default_value_t = 4)]
    max_sessions: usize,
    /// Seconds a session may go without a stream or an action before it is closed.
    #[arg(long, default_value_t = 60)]
    session_idle: u64,
    /// The share of the executor that waiting jobs keep when more sessions run than the machine
    /// can keep at their frame rate (0 to 1; 0: sessions first, always).
    #[arg(long, default_value_t = 0.25)]
    job_floor: f64,
    /// Address WebRTC peers bind their UDP sockets to; it is the host candidate clients connect
    /// to, so it must be reachable by them. Default: --host, or 127.0.0.1 when --host is 0.0.0.0.
    #[arg(long)]
    webrtc_bind: Option<IpAddr>,
    /// A STUN or TURN server for WebRTC peers (repeatable): stun:HOST:PORT or
    /// turn:USER:PASS@HOST:PORT.
    #[arg(long = "webrtc-ice", value_parser = parse_ice)]
    webrtc_ice: Vec<fastvideo_server::IceServer>,
    /// Seconds a WebRTC peer may take to connect after the answer; then its session is closed.
    #[arg(long, default_value_t = 10)]
    webrtc_connect_timeout: u64,
    /// An API key clients must send as `Authorization: Bearer KEY` (repeatable); without any,
    /// the server is open to whoever reaches its port.
    #[arg(long = "api-key")]
    api_keys: Vec<String>,
    /// A file of API keys, one per line (blank lines and `#` comments skipped); keeps keys out of
    /// the process list.
    #[arg(long)]
    api_key_file: Option<PathBuf>,
    /// Serve `/metrics` without a key even when keys are set.
    #[arg(long)]
    metrics_public: bool,
    /// Where jobs and their videos are kept, so a restart (even a crash) loses no finished
    /// work. Default: fastvideo/ in the user's data directory (~/.local/share on Linux).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Keep jobs in memory only: a restart forgets them.
    #[arg(long, conflicts_with = "data_dir")]
    ephemeral: bool,
    /// Seconds a finished video is kept (its `expires_at`); then it is deleted. 0: until
    /// deleted by a client.
    #[arg(long, default_value_t = 86_400)]
    job_ttl: u64,
    /// Space the kept videos may take (bytes, or with K, M, G or T: 512M, 20G); new jobs get
    /// HTTP 507 once they take it. 0: no budget.
    #[arg(long, default_value = "20G", value_parser = parse_size)]
    disk_budget: u64,
    /// After a restart, jobs that were queued or running are run again (`requeue`, same seed)
    /// or marked failed with `server_restarted` (`fail`).
    #[arg(long, default_value = "requeue", value_parser = ["requeue", "fail"])]
    restart_jobs: String,
    /// Where prompts from ComfyUI clients write their outputs and uploads go (`output/`,
    /// `input/`). Default: comfyui/ in the data directory (a temporary folder with --ephemeral).
    #[arg(long)]
    comfy_dir: Option<PathBuf>,
    #[command(flatten)]
    precision: crate::args::PrecisionArgs,
    #[command(flatten)]
    parallel: crate::args::ParallelArgs,
}

/// The data directory (`None` with `--ephemeral`).
fn data_dir(args: &ServeArgs) -> Result<Option<PathBuf>> {
    if args.ephemeral {
        return Ok(None);
    }
    Ok(Some(match &args.data_dir {
        Some(d) => d.clone(),
        None => dirs::data_dir()
            .context("--data-dir: this user has no data directory; pass --data-dir DIR or --ephemeral")?
            .join("fastvideo"),
    }))
}

/// The job store, opened before the model loads so a second server on the same directory is
/// told at once.
fn job_store(args: &ServeArgs) -> Result<Option<fastvideo_server::Store>> {
    data_dir(args)?.map(|d| fastvideo_server::Store::open(&d)).transpose()
}

/// ComfyUI's API, when the deploy enables workflow translators: prompts' outputs and uploads
/// under `--comfy-dir` (default: comfyui/ in the data directory), model folders from the
/// deploy's `[workflows.models]`, of which only the served model's are accepted.
fn comfyui(
    args: &ServeArgs,
    deploy: Option<&Arc<Deployment>>,
    model_dir: &Path,
    device: tch::Device,
) -> Result<Option<fastvideo_server::ComfyConfig>> {
    let (Some(d), Some(path)) = (deploy, args.deploy.as_deref()) else { return Ok(None) };
    let translators = d.translators().map_err(|e| anyhow::anyhow!("--deploy {}: {e}", path.display()))?;
    if translators.types().is_empty() {
        return Ok(None);
    }
    let root = match (&args.comfy_dir, data_dir(args)?) {
        (Some(d), _) => d.clone(),
        (None, Some(data)) => data.join("comfyui"),
        (None, None) => std::env::temp_dir().join(format!("fastvideo-comfyui-{}", std::process::id())),
    };
    for sub in ["output", "input", "temp"] {
        std::fs::create_dir_all(root.join(sub))
            .with_context(|| format!("--comfy-dir: creating {}", root.join(sub).display()))?;
    }
    let served = model_dir.canonicalize().unwrap_or_else(|_| model_dir.to_path_buf());
    let deploy_file = path.to_path_buf();
    let serves = Arc::new(move |folder: &str| {
        crate::workflow::model_folder(&deploy_file, folder)
            .ok()
            .and_then(|p| p.canonicalize().ok())
            .is_some_and(|p| p == served)
    });
    let device_info = match device {
        tch::Device::Cuda(i) => {
            let free = fastvideo_kernels::cuda::memory_free(i).unwrap_or(0);
            let total = fastvideo_kernels::cuda::memory_used(i).map_or(0, |used| used + free);
            fastvideo_server::DeviceInfo {
                kind: "cuda".into(),
                name: format!("cuda:{i}"),
                vram_total: total,
                vram_free: free,
            }
        }
        _ => fastvideo_server::DeviceInfo { kind: "cpu".into(), name: "cpu".into(), ..Default::default() },
    };
    eprintln!(
        "fastvideo: ComfyUI API on (/prompt, /ws): {} node types, files in {}",
        translators.types().len(),
        root.display()
    );
    Ok(Some(fastvideo_server::ComfyConfig {
        translators,
        models: d.workflows.clone(),
        serves,
        root,
        device: device_info,
    }))
}

/// `512M`, `20G`, `1.5T` (binary units) or a plain byte count.
fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, unit) = match t.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => t.split_at(i),
        None => (t, ""),
    };
    let shift = match unit.to_ascii_uppercase().trim_end_matches(['B', 'I']) {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return Err(format!("`{s}`: the unit must be K, M, G or T")),
    };
    let n: f64 = num.trim().parse().map_err(|_| format!("`{s}` is not a size such as 512M or 20G"))?;
    if !n.is_finite() || n < 0.0 || n * (1u64 << shift) as f64 >= u64::MAX as f64 {
        return Err(format!("`{s}` is out of range"));
    }
    Ok((n * (1u64 << shift) as f64) as u64)
}

fn parse_ice(s: &str) -> Result<fastvideo_server::IceServer, String> {
    fastvideo_server::RtcConfig::parse_ice_server(s)
}

/// `--api-key` values and `--api-key-file` lines, checked before anything is loaded.
fn api_keys(args: &ServeArgs) -> Result<Vec<String>> {
    let mut keys = args.api_keys.clone();
    if let Some(f) = &args.api_key_file {
        let text = std::fs::read_to_string(f).with_context(|| format!("--api-key-file: reading {}", f.display()))?;
        let before = keys.len();
        keys.extend(text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).map(String::from));
        if keys.len() == before {
            bail!("--api-key-file: {} holds no key", f.display());
        }
    }
    if keys.iter().any(|k| k.len() < 8) {
        bail!("--api-key: keys must be at least 8 characters");
    }
    if keys.is_empty() && !args.host.is_loopback() {
        eprintln!("fastvideo: no --api-key: anyone who reaches {} can use this server", args.host);
    }
    Ok(keys)
}

pub fn run(args: ServeArgs) -> Result<()> {
    if args.max_active == 0 || args.max_queue == 0 || args.max_batch == Some(0) {
        bail!("--max-active, --max-queue and --max-batch must be positive");
    }
    if args.max_stretch.is_nan() || (args.max_stretch != 0.0 && args.max_stretch < 1.0) {
        bail!("--max-stretch: {} must be at least 1 (a multiple of a job's solo time), or 0 for off", args.max_stretch);
    }
    if !(args.overdue_share > 0.0 && args.overdue_share <= 1.0) {
        bail!("--overdue-share: {} is not a share above 0 and at most 1", args.overdue_share);
    }
    if !(0.0..=1.0).contains(&args.job_floor) {
        bail!("--job-floor: {} is not a share between 0 and 1", args.job_floor);
    }
    let keys = api_keys(&args)?;
    let store = job_store(&args)?;
    let retention = fastvideo_server::Retention {
        ttl: (args.job_ttl > 0).then(|| Duration::from_secs(args.job_ttl)),
        disk_budget: (args.disk_budget > 0).then_some(args.disk_budget),
    };
    let device = fastvideo_torch::device(&args.device)?;
    let (model_dir, model_id) = match &args.model {
        Some(m) => (m.clone(), m.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or("model".into())),
        None => (crate::default_model::locate()?, "fastvideo-default".to_string()),
    };
    let mut model = args.precision.load(&model_dir, device)?;
    args.parallel.apply(&mut model)?;
    let deploy = match &args.deploy {
        Some(p) => Some(Arc::new(Deployment::load(p).with_context(|| format!("--deploy {}", p.display()))?)),
        None => None,
    };
    let comfy = comfyui(&args, deploy.as_ref(), &model_dir, device)?;
    let binding = Binding::of(deploy.as_ref(), &model_id);
    crate::generate::announce(&binding, false);
    let spec = Arc::new(pipeline::text_to_video_with(&model, binding.policies.clone())?);
    let check = Box::new(binding.request_check());
    // POST /v1/weights rebuilds the pipeline around new transformer weights, same policies.
    let weights = Some(fastvideo_engine::WeightUpdates {
        loader: Arc::new(fastvideo_wan::update::WanWeightLoader::new(&model, binding.policies.clone())),
        initial: model.dir.join("transformer"),
    });
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Metrics::register(&mut registry);
    let memory_bytes = match (args.memory_mib, device) {
        (Some(mib), _) => mib << 20,
        (None, tch::Device::Cuda(i)) => fastvideo_kernels::cuda::memory_free(i).map_or(8 << 30, |free| free / 10 * 9),
        (None, _) => 8 << 30,
    };
    eprintln!("fastvideo: admitting requests predicted to hold up to {} MiB together", memory_bytes >> 20);
    let cfg = EngineConfig {
        policy: args.policy,
        max_active: args.max_active,
        max_queue: args.max_queue,
        memory_bytes,
        max_request_seconds: args.max_request_seconds,
        max_batch: args.max_batch.unwrap_or(if device.is_cuda() { 8 } else { 1 }),
        cost: fastvideo_engine::CostConfig::for_device(device.is_cuda()),
        max_sessions: args.max_sessions.max(1),
        session_idle: Duration::from_secs(args.session_idle.max(1)),
        job_floor: args.job_floor,
        max_stretch: if args.max_stretch == 0.0 { f64::INFINITY } else { args.max_stretch },
        overdue_share: args.overdue_share,
        ..Default::default()
    };
    let sessions = match &args.world {
        Some(w) => {
            let dir = if w == "default" { crate::default_model::locate_world()? } else { PathBuf::from(w) };
            let world = Arc::new(args.precision.load_world(&dir, device)?);
            let id = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or("world".into());
            let first = world.clone();
            let s = fastvideo_wan::sessions::WorldSessions::new(id, world, cfg.max_sessions, device)
                .with_first_frame(Box::new(move |seed| crate::eval_world::simulator_frame(&first, seed)))
                .with_metrics(metrics.clone());
            Some(Arc::new(s) as Arc<dyn fastvideo_engine::session::SessionModel>)
        }
        None => None,
    };
    let (hits, misses) = (metrics.embedding_cache_hits.clone(), metrics.embedding_cache_misses.clone());
    model.text_cache.observe(Box::new(move |hit| {
        if hit { &hits } else { &misses }.inc();
    }));
    if let Some(d) = &deploy {
        let plugin_seconds = metrics.plugin_seconds.clone();
        d.runtime.observe_calls(Box::new(move |s| {
            plugin_seconds.inc_by(s);
        }));
    }
    let limits = model.limits();
    let engine = Engine::start_with_sessions(
        EngineModel { id: model_id, limits, spec, device, check, classify: Binding::classify_failure, weights },
        sessions,
        cfg,
        metrics,
    );
    let server = ServerConfig {
        addr: SocketAddr::new(args.host, args.port),
        drain: if args.drain == "cancel" { DrainMode::Cancel } else { DrainMode::Finish },
        drain_timeout: Duration::from_secs(args.drain_timeout),
        limits: fastvideo_server::ConnLimits {
            header_timeout: Duration::from_secs(args.header_timeout.max(1)),
            max_connections: args.max_connections.max(1),
            body_timeout: Duration::from_secs(args.body_timeout.max(1)),
            ..Default::default()
        },
        requeue_unfinished: args.restart_jobs == "requeue",
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the async runtime")?;
    let webrtc_bind = args.webrtc_bind.unwrap_or(if args.host.is_unspecified() {
        eprintln!("fastvideo: WebRTC peers bind to 127.0.0.1; pass --webrtc-bind ADDRESS for remote clients");
        IpAddr::from([127, 0, 0, 1])
    } else {
        args.host
    });
    let webrtc = fastvideo_server::RtcConfig {
        bind: webrtc_bind,
        ice_servers: args.webrtc_ice.clone(),
        connect_timeout: Duration::from_secs(args.webrtc_connect_timeout.max(1)),
        ..Default::default()
    };
    let mut state = AppState::new(engine, registry)
        .with_job_store(store, retention)
        .with_webrtc(webrtc)
        .with_api_keys(fastvideo_server::ApiKeys::new(&keys, args.metrics_public));
    if let Some(c) = comfy {
        state = state.with_comfyui(c);
    }
    rt.block_on(fastvideo_server::serve(state, server))
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_parse_in_binary_units() {
        use super::parse_size;
        assert_eq!(parse_size("20G"), Ok(20 << 30));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("1.5k"), Ok(1536));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("12Q").unwrap_err().contains("unit"));
        assert!(parse_size("-1G").is_err() && parse_size("G").is_err() && parse_size("99999999T").is_err());
    }
}
