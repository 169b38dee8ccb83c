//! Live world-model sessions for the engine: the world model, its session pool, and the first
//! frame drawn by the shipped world's simulator.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use fastvideo_engine::session::SessionModel;
use fastvideo_models::{missing, Capability, ModelKind, SessionOptions, SleepTier};
use fastvideo_plugin_host::{Binding, Deployment};
use fastvideo_procedural::world::WorldState;
use tch::{Device, Kind, Tensor};

use crate::config::{ModelConfig, WorldConfig};
use crate::locate;

/// The world-model folder `model` names (`default`: the shipped one).
pub fn world_dir(model: &str) -> Result<PathBuf> {
    if model == "default" {
        locate::world_model()
    } else {
        Ok(PathBuf::from(model))
    }
}

/// The world model as the engine serves it.
pub struct ServedWorld {
    /// The world model's folder.
    pub dir: PathBuf,
    /// The model as the engine's sessions run it.
    pub sessions: Arc<dyn SessionModel>,
    /// Its transformer's weights on the device.
    pub bytes: u64,
}

/// Loads the world model through the registry and makes the engine's session model, sized for
/// `max_sessions`, with the deploy's guider, step interceptor and observers bound into its
/// session pipeline. Without adapters (they merge into its weights) its transformer may sleep in
/// host memory while no session runs. Also answers its transformer's bytes (for the weight
/// budget).
pub fn sessions(
    world: &WorldConfig,
    model: &ModelConfig,
    deploy: Option<&Arc<Deployment>>,
    adapters: &crate::config::AdapterConfig,
    device: Device,
) -> Result<Option<ServedWorld>> {
    let Some(name) = &world.model else { return Ok(None) };
    let dir = world_dir(name)?;
    let loaded = model
        .load_model(&dir, ModelKind::World, device, false)
        .with_context(|| format!("--model {}", dir.display()))?;
    // Only a GPU has kernels to compile and plans to make before the first session.
    if device.is_cuda() {
        let seconds = loaded.warm_up()?;
        tracing::info!(seconds, "world model warmed up");
    }
    let id = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or("world".into());
    let family = loaded.summary().family;
    let sources = deploy.map_or(&[][..], |d| &d.world_adapters[..]);
    let cache = if sources.is_empty() {
        None
    } else {
        // (Sessions encode their prompt outside a pipeline: text-encoder keys are refused.)
        let target = loaded.adapter_target().ok_or_else(|| missing(&id, family, Capability::Adapters))?;
        let cache = fastvideo_pipeline::AdapterCache::new(
            target,
            sources.to_vec(),
            adapters.cache_mib << 20,
            adapters.max_per_request,
        )
        .map_err(|e| e.context("[[adapters]] with world = true: for the world model"))?;
        Some(Arc::new(cache))
    };
    let bytes = loaded.resident_bytes();
    let residency = match cache {
        None => loaded.residency(SleepTier::Host)?,
        Some(_) => None,
    };
    let options = SessionOptions {
        id: id.clone(),
        max_sessions: world.max_sessions.max(1),
        policies: Binding::of(deploy, &id).policies,
        first_frame: Some(Arc::new(simulator_frame)),
        adapters: cache,
        residency,
    };
    let sessions = loaded.sessions(options)?.ok_or_else(|| missing(&id, family, Capability::Sessions))?;
    Ok(Some(ServedWorld { dir: dir.canonicalize().unwrap_or(dir), sessions, bytes }))
}

/// The world simulator's first frame for `seed` at `width`×`height`, as a model's input
/// `[1, 3, 1, H, W]` in [-1, 1].
pub fn simulator_frame(seed: u64, width: u32, height: u32) -> Result<Tensor> {
    if height != width {
        bail!("the world simulator draws square frames; this model is {width}x{height}");
    }
    let size = width as i64;
    let rgb = WorldState::sample(seed).draw(size as usize);
    let frame = Tensor::from_slice(&rgb).view([1, size, size, 3]).permute([3, 0, 1, 2]).unsqueeze(0);
    Ok(frame.to_kind(Kind::Float) / 127.5 - 1.0)
}
