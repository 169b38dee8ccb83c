//! [`build_server`]: the HTTP server's state around an assembled engine: job store, API keys,
//! WebRTC, and the ComfyUI API when the deploy enables translators.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use fastvideo_plugin_host::Deployment;
use fastvideo_server::{AppState, ComfyConfig, DeviceInfo, DrainMode, Files, ServerConfig, Store, WebhookPolicy};
use tch::Device;

use crate::config::{Drain, RestartJobs, ServeConfig};
use crate::engine::{build_engine, Assembly};

/// What `fastvideo serve` runs: the server state, its listener settings, and the assembly
/// (for what was built).
pub struct Served {
    /// The server's shared state, ready for its router.
    pub state: AppState,
    /// How it listens and drains.
    pub server: ServerConfig,
    /// What the engine was built with.
    pub description: crate::EngineDescription,
}

/// Checks keys and opens the job store first (so a typo or a second server on the same folder
/// is told before the model loads), then builds the engine and the server state around it.
pub fn build_server(cfg: &ServeConfig) -> Result<Served> {
    cfg.validate()?;
    let keys = api_keys(cfg)?;
    let dir = data_dir(cfg)?;
    let store = dir.as_ref().map(|d| Store::open(d)).transpose()?;
    let webhooks = webhooks(cfg)?;
    // Uploads (`/v1/files`) beside the jobs when there is a data dir, else in memory.
    let files = match &dir {
        Some(d) => Files::open(&d.join("uploads"), fastvideo_server::DEFAULT_FILES_BUDGET)
            .with_context(|| format!("--data-dir {}: uploads", d.display()))?,
        None => Files::default(),
    };
    let assembly = build_engine(cfg)?;
    let comfy = comfyui(cfg, assembly.deploy.as_ref(), &assembly.model.dir, &assembly.model.name, assembly.device)?;
    let Assembly { engine, registry, description, chat, prompt_warnings, model_info, .. } = assembly;
    let s = &cfg.storage;
    let retention = fastvideo_server::Retention {
        ttl: (s.job_ttl > 0).then(|| Duration::from_secs(s.job_ttl)),
        disk_budget: (s.disk_budget > 0).then_some(s.disk_budget),
    };
    let h = &cfg.http;
    let mut state = AppState::new(engine, registry)
        .with_prompt_warnings(prompt_warnings)
        .with_model_info(model_info)
        .with_job_store(store, retention)
        .with_files(files)
        .with_webrtc(webrtc(cfg)?)
        .with_api_keys(
            fastvideo_server::ApiKeys::new(&keys, cfg.auth.metrics_public)
                .map_err(|e| anyhow::anyhow!("auth.api_keys (--api-key, --api-key-file): {e}"))?
                .with_max_priority(cfg.auth.max_priority),
        );
    if let Some(c) = comfy {
        state = state.with_comfyui(c);
    }
    if let Some((id, codec)) = chat {
        state = state.with_chat(id, codec);
    }
    if let Some((policy, secret)) = webhooks {
        let schedule = fastvideo_server::RetrySchedule {
            window: Duration::from_secs(cfg.webhooks.retry_hours * 3600),
            ..Default::default()
        };
        state = state
            .with_webhooks(policy, &secret, schedule)
            .map_err(|e| anyhow::anyhow!("webhooks.secret_file (--webhook-secret-file): {e}"))?;
    }
    let server = ServerConfig {
        addr: SocketAddr::new(h.host, h.port),
        drain: match h.drain {
            Drain::Cancel => DrainMode::Cancel,
            Drain::Finish => DrainMode::Finish,
        },
        drain_timeout: Duration::from_secs(h.drain_timeout),
        limits: fastvideo_server::ConnLimits {
            header_timeout: Duration::from_secs(h.header_timeout.max(1)),
            max_connections: h.max_connections.max(1),
            body_timeout: Duration::from_secs(h.body_timeout.max(1)),
            ..Default::default()
        },
        requeue_unfinished: s.restart_jobs == RestartJobs::Requeue,
    };
    Ok(Served { state, server, description })
}

/// The webhook allowlist and the signing secret, read before anything loads.
fn webhooks(cfg: &ServeConfig) -> Result<Option<(WebhookPolicy, String)>> {
    let w = &cfg.webhooks;
    let Some(file) = w.secret_file.as_ref().filter(|_| !w.allow.is_empty()) else { return Ok(None) };
    let policy = WebhookPolicy::new(&w.allow).map_err(|e| anyhow::anyhow!("webhooks.allow: {e}"))?;
    let secret = std::fs::read_to_string(file)
        .with_context(|| format!("webhooks.secret_file (--webhook-secret-file): reading {}", file.display()))?;
    // `AppState::with_webhooks` checks the secret itself (a bad one is named there).
    Ok(Some((policy, secret.trim().to_string())))
}

/// The data directory (`None` when ephemeral).
pub fn data_dir(cfg: &ServeConfig) -> Result<Option<PathBuf>> {
    if cfg.storage.ephemeral {
        return Ok(None);
    }
    Ok(Some(match &cfg.storage.data_dir {
        Some(d) => d.clone(),
        None => dirs::data_dir()
            .context(
                "storage.data_dir (--data-dir): this user has no data directory; pass --data-dir DIR or --ephemeral",
            )?
            .join("fastvideo"),
    }))
}

/// The configured keys and the key file's lines, checked before anything is loaded.
pub fn api_keys(cfg: &ServeConfig) -> Result<Vec<String>> {
    let mut keys = cfg.auth.api_keys.clone();
    if let Some(f) = &cfg.auth.api_key_file {
        let text = std::fs::read_to_string(f)
            .with_context(|| format!("auth.api_key_file (--api-key-file): reading {}", f.display()))?;
        let before = keys.len();
        keys.extend(text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).map(String::from));
        if keys.len() == before {
            bail!("auth.api_key_file (--api-key-file): {} holds no key", f.display());
        }
    }
    if keys.iter().any(|k| k.split_whitespace().next().unwrap_or_default().len() < 8) {
        bail!("auth.api_keys (--api-key): keys must be at least 8 characters");
    }
    if keys.is_empty() && !cfg.http.host.is_loopback() {
        eprintln!(
            "fastvideo: no API key (--api-key, auth.api_keys): anyone who reaches {} can use this server",
            cfg.http.host
        );
    }
    Ok(keys)
}

fn webrtc(cfg: &ServeConfig) -> Result<fastvideo_server::RtcConfig> {
    let bind = cfg.webrtc.bind.unwrap_or(if cfg.http.host.is_unspecified() {
        eprintln!("fastvideo: WebRTC peers bind to 127.0.0.1; pass --webrtc-bind ADDRESS for remote clients");
        IpAddr::from([127, 0, 0, 1])
    } else {
        cfg.http.host
    });
    let ice_servers = cfg
        .webrtc
        .ice
        .iter()
        .map(|s| {
            fastvideo_server::RtcConfig::parse_ice_server(s)
                .map_err(|e| anyhow::anyhow!("webrtc.ice (--webrtc-ice): {e}"))
        })
        .collect::<Result<_>>()?;
    Ok(fastvideo_server::RtcConfig {
        bind,
        ice_servers,
        connect_timeout: Duration::from_secs(cfg.webrtc.connect_timeout.max(1)),
        ..Default::default()
    })
}

/// ComfyUI's API, when the deploy enables workflow translators: prompts' outputs and uploads
/// under `storage.comfy_dir` (default: comfyui/ in the data directory), model folders from the
/// deploy's `[workflows.models]`, of which only the served model's are accepted.
fn comfyui(
    cfg: &ServeConfig,
    deploy: Option<&Arc<Deployment>>,
    model_dir: &Path,
    model_name: &str,
    device: Device,
) -> Result<Option<ComfyConfig>> {
    let (Some(d), Some(path)) = (deploy, cfg.deploy.as_deref()) else { return Ok(None) };
    let translators = d.translators().map_err(|e| anyhow::anyhow!("--deploy {}: {e}", path.display()))?;
    if translators.types().is_empty() {
        return Ok(None);
    }
    let root = match (&cfg.storage.comfy_dir, data_dir(cfg)?) {
        (Some(d), _) => d.clone(),
        (None, Some(data)) => data.join("comfyui"),
        (None, None) => std::env::temp_dir().join(format!("fastvideo-comfyui-{}", std::process::id())),
    };
    for sub in ["output", "input", "temp"] {
        std::fs::create_dir_all(root.join(sub))
            .with_context(|| format!("storage.comfy_dir (--comfy-dir): creating {}", root.join(sub).display()))?;
    }
    // Every served video model's folder, so a workflow's loaders pick among them.
    let canonical = |d: &Path| d.canonicalize().unwrap_or_else(|_| d.to_path_buf());
    let mut served = vec![(canonical(model_dir), model_name.to_string())];
    served.extend(cfg.models.iter().map(|m| (canonical(&m.path), m.name.clone())));
    let deploy_file = path.to_path_buf();
    let serves = Arc::new(move |folder: &str| {
        let dir = crate::locate::workflow_model_folder(&deploy_file, folder).ok()?.canonicalize().ok()?;
        served.iter().find(|(d, _)| *d == dir).map(|(_, name)| name.clone())
    });
    let device = match device {
        Device::Cuda(i) => {
            let free = fastvideo_kernels::cuda::memory_free(i).unwrap_or(0);
            let total = fastvideo_kernels::cuda::memory_used(i).map_or(0, |used| used + free);
            DeviceInfo { kind: "cuda".into(), name: format!("cuda:{i}"), vram_total: total, vram_free: free }
        }
        _ => DeviceInfo { kind: "cpu".into(), name: "cpu".into(), ..Default::default() },
    };
    eprintln!(
        "fastvideo: ComfyUI API on (/prompt, /ws): {} node types, files in {}",
        translators.types().len(),
        root.display()
    );
    Ok(Some(ComfyConfig { translators, models: d.workflows.clone(), serves, root, device }))
}
