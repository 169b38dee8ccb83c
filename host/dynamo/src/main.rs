//! `fastvideo-dynamo`: fastvideo as an NVIDIA Dynamo worker. It loads a model, starts
//! fastvideo's engine (the step scheduler `fastvideo serve` runs, with the same deploy and
//! plugins), and serves it to Dynamo's frontend as a Videos and an Images model, found through
//! Dynamo's discovery (a shared folder on one machine, etcd or Kubernetes across machines).
//!
//! Built on `dynamo-runtime` alone, not `dynamo-backend-common`: the latter's `RawEngine` brings
//! `dynamo-llm`, whose memory crate compiles NIXL bindings (libclang, a C++ compiler) and
//! several hundred more crates, for a lifecycle (signals, readiness, drain) that is a page here.
//!
//! Lifecycle: not ready until the model is loaded and both endpoints are registered; on
//! SIGTERM or Ctrl-C it turns not ready, leaves discovery at once (the frontend stops routing
//! to it), lets in-flight requests finish, and exits 0.

mod chat;
mod handler;
mod protocol;

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use dynamo_runtime::config::HealthStatus;
use dynamo_runtime::discovery::DiscoverySpec;
use dynamo_runtime::engine::AsyncEngine;
use dynamo_runtime::local_endpoint_registry::LocalAsyncEngine;
use dynamo_runtime::metrics::MetricsHierarchy;
use dynamo_runtime::pipeline::network::Ingress;
use dynamo_runtime::pipeline::{ManyOut, SingleIn};
use dynamo_runtime::protocols::annotated::Annotated;
use dynamo_runtime::{DistributedRuntime, Runtime};
use fastvideo_assembly::args::EngineArgs;
use fastvideo_assembly::ServeConfig;
use fastvideo_engine::Engine;
use fastvideo_request::TaskType;
use serde_json::{json, Value};

use handler::{Endpoint, Handler, Load, Media};
use protocol::Kind;

#[derive(Parser)]
#[command(name = "fastvideo-dynamo", version, about = "fastvideo as an NVIDIA Dynamo worker")]
struct Args {
    /// The model, its precision and parallel layout, the deploy and the scheduler: the same
    /// options (and `--config` file) as `fastvideo serve`, built by the same assembly.
    #[command(flatten)]
    engine: EngineArgs,
    /// Dynamo namespace and component the endpoints live in.
    #[arg(long, default_value = "dynamo")]
    namespace: String,
    #[arg(long, default_value = "fastvideo")]
    component: String,
    /// Where videos asked for as `url` are written.
    #[arg(long, default_value = "media")]
    media_dir: PathBuf,
    /// The URL that serves --media-dir (default: its file:// URL).
    #[arg(long)]
    media_url: Option<String>,
    /// Longest wait for in-flight requests after SIGTERM.
    #[arg(long, default_value_t = 300)]
    drain_timeout: u64,
    /// Seconds after leaving discovery during which requests still arrive and are served (the
    /// frontend needs a moment to see the worker gone); then new ones are refused.
    #[arg(long, default_value_t = 3)]
    drain_grace: u64,
    /// Build the engine, print what was built (as `fastvideo serve --print-engine` does) and
    /// exit without joining Dynamo.
    #[arg(long)]
    print_engine: bool,
}

/// The card the frontend's model watcher reads: a name-only model (no tokenizer) taking text.
fn card(name: &str, model_type: &str) -> serde_json::Value {
    let slug: String = name
        .to_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
        .collect();
    json!({
        "display_name": name, "slug": slug, "kv_cache_block_size": 0, "migration_limit": 0,
        "model_type": model_type, "model_input": "Text", "worker_type": "aggregated", "needs": [], "runtime_config": {},
    })
}

/// A serve config shared with `fastvideo serve` may set what the worker has no use for (the
/// frontend does HTTP, keys and storage): say so instead of ignoring it silently.
fn warn_unused_sections(cfg: &ServeConfig) {
    let unused = [
        ("[http]", cfg.http != Default::default()),
        ("[webrtc]", cfg.webrtc != Default::default()),
        ("[auth]", cfg.auth != Default::default()),
        ("[storage]", cfg.storage != Default::default()),
        ("[world]", cfg.world != Default::default()),
    ];
    for (section, set) in unused {
        if set {
            eprintln!("fastvideo-dynamo: ignoring the config's {section} settings (fastvideo serve's; Dynamo's frontend serves HTTP)");
        }
    }
}

/// The language model served beside the video models, when the config has one: its id and codec.
type ChatLm = Option<(String, Arc<dyn fastvideo_request::chat::ChatCodec>)>;

/// Loads the model and starts fastvideo's engine from the same config `fastvideo serve` takes.
fn start_engine(cfg: &ServeConfig) -> Result<(Engine, String, ChatLm)> {
    let built = fastvideo_assembly::build_engine(cfg)?;
    for line in &built.description.plugins {
        eprintln!("{line}");
    }
    eprintln!(
        "fastvideo-dynamo: model {} loaded from {} on {:?}",
        built.model.name,
        built.model.dir.display(),
        built.device
    );
    Ok((built.engine, built.model.name, built.chat))
}

fn main() -> Result<()> {
    dynamo_runtime::logging::init();
    let args = Args::parse();
    let cfg = args.engine.config()?;
    if cfg.world.model.is_some() {
        anyhow::bail!(
            "--world: world sessions are served by `fastvideo serve` (the Dynamo worker serves videos and images)"
        );
    }
    warn_unused_sections(&cfg);
    if args.print_engine {
        let built = fastvideo_assembly::build_engine(&cfg)?;
        println!("{}", serde_json::to_string_pretty(&built.description)?);
        return Ok(());
    }
    let (engine, name, chat) = start_engine(&cfg)?;
    std::fs::create_dir_all(&args.media_dir).with_context(|| format!("--media-dir {}", args.media_dir.display()))?;
    let media_dir = args.media_dir.canonicalize()?;
    let base_url = args.media_url.clone().unwrap_or_else(|| format!("file://{}/", media_dir.display()));
    let media =
        Media { dir: media_dir, base_url: if base_url.ends_with('/') { base_url } else { format!("{base_url}/") } };
    let rt = Runtime::from_settings()?;
    let secondary = rt.secondary();
    secondary.block_on(serve(rt, args, engine, name, chat, media))
}

/// Where the worker's endpoints register.
struct Registration<'a> {
    drt: &'a DistributedRuntime,
    component: &'a dynamo_runtime::component::Component,
    args: &'a Args,
}

impl Registration<'_> {
    /// Starts `service` as endpoint `endpoint`, with a card of `model_type` for each of `models`
    /// (what the frontend's model watcher reads) and `probe` as its canary payload.
    async fn endpoint(
        &self,
        endpoint: &str,
        service: LocalAsyncEngine,
        models: &[String],
        model_type: &str,
        probe: Value,
    ) -> Result<(Vec<dynamo_runtime::discovery::DiscoveryInstance>, dynamo_runtime::component::StartedEndpoint)> {
        let as_engine: Arc<dyn AsyncEngine<SingleIn<Value>, ManyOut<Annotated<Value>>, anyhow::Error>> =
            service.clone();
        let ingress = Ingress::for_engine(as_engine)?;
        let mut cards = Vec::new();
        for model in models {
            let (ns, comp) = (self.args.namespace.clone(), self.args.component.clone());
            let spec = DiscoverySpec::from_model(ns, comp, endpoint.into(), &card(model, model_type))?;
            cards.push(self.drt.discovery().register(spec).await?);
        }
        let builder = self
            .component
            .endpoint(endpoint.to_string())
            .endpoint_builder()
            .handler(ingress)
            .graceful_shutdown(true)
            .health_check_payload(probe)
            .register_local_engine(service)?;
        Ok((cards, builder.start_with_registration().await?))
    }
}

async fn serve(rt: Runtime, args: Args, engine: Engine, name: String, chat: ChatLm, media: Media) -> Result<()> {
    let drt = DistributedRuntime::from_settings(rt.clone()).await?;
    let component = drt.namespace(args.namespace.clone())?.component(args.component.clone())?;
    let load = Arc::new(Load::default());
    let mut started = Vec::new();
    let mut cards = Vec::new();
    let to = Registration { drt: &drt, component: &component, args: &args };
    for (kind, endpoint, model_type) in [(Kind::Videos, "videos", "Videos"), (Kind::Images, "images", "Images")] {
        let handler = Arc::new(Handler { engine: engine.clone(), kind, media: media.clone(), load: load.clone() });
        // One card per served model that takes this endpoint's task: the frontend routes by the
        // request's `model`, the handler runs it on that model.
        let task = if kind == Kind::Videos { TaskType::T2v } else { TaskType::T2i };
        let mut names: Vec<String> =
            engine.models().iter().filter(|(_, l)| l.tasks.contains(&task)).map(|(id, _)| id.to_string()).collect();
        if names.is_empty() {
            names.push(name.clone());
        }
        let service: LocalAsyncEngine = Arc::new(Endpoint(handler));
        // The canary payload: the smallest request the model takes, one step.
        let probe = json!({ "prompt": "health check", "nvext": { "num_inference_steps": 1, "num_frames": 1 } });
        let (c, s) = to.endpoint(endpoint, service, &names, model_type, probe).await?;
        cards.extend(c);
        started.push(s);
    }
    // The language model, as a Chat and Completions model taking text (the engine templates and
    // tokenizes), on an endpoint of its own.
    if let Some((id, codec)) = chat {
        let handler = Arc::new(chat::ChatHandler { engine: engine.clone(), id: id.clone(), codec, load: load.clone() });
        let service: LocalAsyncEngine = Arc::new(chat::ChatEndpoint(handler));
        let probe = json!({ "messages": [{"role": "user", "content": "health check"}], "max_tokens": 1 });
        let (c, s) = to.endpoint("chat", service, &[id], "Chat | Completions", probe).await?;
        cards.extend(c);
        started.push(s);
    }
    // What the frontend cannot see for non-token work: each request's predicted cost.
    let m = component.metrics();
    let live = m.create_gauge("fastvideo_live_requests", "Requests admitted and not finished", &[])?;
    let backlog =
        m.create_gauge("fastvideo_backlog_seconds", "Predicted seconds of the work admitted and not finished", &[])?;
    let (l, e) = (load.clone(), engine.clone());
    tokio::spawn(async move {
        loop {
            live.set(l.live.load(Ordering::Relaxed).max(e.live() as u64) as f64);
            backlog.set(l.backlog_ms.load(Ordering::Relaxed) as f64 / 1000.0);
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    });
    drt.system_health().lock().set_health_status(HealthStatus::Ready);
    eprintln!("fastvideo-dynamo: serving {name} (videos, images) as {}/{}", args.namespace, args.component);

    stop_signal().await;
    // Not ready and out of discovery first, so the frontend routes new requests elsewhere;
    // then in-flight requests finish (the runtime waits for open response streams).
    eprintln!("fastvideo-dynamo: draining ({} requests in flight)", engine.live());
    drt.system_health().lock().set_health_status(HealthStatus::NotReady);
    for c in cards {
        if let Err(e) = drt.discovery().unregister(c).await {
            tracing::warn!("unregistering a model card: {e:#}");
        }
    }
    tokio::time::sleep(Duration::from_secs(args.drain_grace)).await;
    engine.drain(false);
    if tokio::time::timeout(Duration::from_secs(args.drain_timeout), engine.idle()).await.is_err() {
        eprintln!("fastvideo-dynamo: drain timeout; cancelling {} requests", engine.live());
        engine.drain(true);
    }
    // Replies still streaming out, then the runtime's own shutdown.
    while load.live.load(Ordering::Relaxed) > 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    drt.shutdown();
    for s in started {
        let _ = tokio::time::timeout(Duration::from_secs(10), s.wait()).await;
    }
    eprintln!("fastvideo-dynamo: drained");
    Ok(())
}

/// SIGTERM or Ctrl-C.
async fn stop_signal() {
    let mut term =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term.recv() => {},
    }
}
