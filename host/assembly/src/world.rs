//! Live world-model sessions for the engine: the world model, its session pool, and the first
//! frame drawn by the shipped world's simulator.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Result};
use fastvideo_engine::session::SessionModel;
use fastvideo_plugin_host::{Binding, Deployment};
use fastvideo_procedural::world::WorldState;
use fastvideo_wan::sessions::{FirstFrame, WorldSessions};
use fastvideo_wan::world::WorldModel;
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
    pub dir: PathBuf,
    pub sessions: Arc<dyn SessionModel>,
    /// Its transformer's weights on the device.
    pub bytes: u64,
}

/// Loads the world model and makes the engine's session model, sized for `max_sessions`, with
/// the deploy's guider, step interceptor and observers bound into its session pipeline. Without
/// adapters (they merge into its weights) its transformer may sleep in host memory while no
/// session runs. Also answers its transformer's bytes (for the weight budget).
pub fn sessions(
    world: &WorldConfig,
    model: &ModelConfig,
    deploy: Option<&Arc<Deployment>>,
    adapters: &crate::config::AdapterConfig,
    device: Device,
) -> Result<Option<ServedWorld>> {
    let Some(name) = &world.model else { return Ok(None) };
    let dir = world_dir(name)?;
    let loaded = Arc::new(model.load_world(&dir, device)?);
    if device.is_cuda() {
        // Kernels compiled and library plans made now, not in the first session's first chunk.
        let seconds = tch::no_grad(|| fastvideo_wan::chunk_rollout::warm_up(&loaded, device))
            .map_err(|e| e.context(format!("warming up the world model {}", dir.display())))?;
        tracing::info!(seconds, "world model warmed up");
    }
    let id = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or("world".into());
    let first = loaded.clone();
    let policies = Binding::of(deploy, &id).policies;
    let first_frame: FirstFrame = Arc::new(move |seed| simulator_frame(&first, seed));
    let sources = deploy.map_or(&[][..], |d| &d.world_adapters[..]);
    let cache = if sources.is_empty() {
        None
    } else {
        let target = Arc::clone(&loaded.wan.transformer) as Arc<dyn fastvideo_pipeline::AdapterTarget>;
        // (Sessions encode their prompt outside a pipeline: text-encoder keys are refused.)
        let cache = fastvideo_pipeline::AdapterCache::new(
            target,
            sources.to_vec(),
            adapters.cache_mib << 20,
            adapters.max_per_request,
        )
        .map_err(|e| e.context("[[adapters]] with world = true: for the world model"))?;
        Some(Arc::new(cache))
    };
    let bytes = fastvideo_wan::residency::resident_bytes(&loaded.wan);
    let residency = cache.is_none().then(|| {
        Arc::new(fastvideo_wan::residency::TransformerResidency::new(&loaded.wan))
            as Arc<dyn fastvideo_pipeline::Residency>
    });
    let s = WorldSessions::new(id, loaded, world.max_sessions.max(1), device, policies, Some(first_frame))?
        .with_adapters(cache)
        .with_residency(residency);
    Ok(Some(ServedWorld { dir: dir.canonicalize().unwrap_or(dir), sessions: Arc::new(s), bytes }))
}

/// The world simulator's first frame for `seed`, as the model's input `[1, 3, 1, H, W]` in [-1, 1].
pub fn simulator_frame(model: &WorldModel, seed: u64) -> Result<Tensor> {
    if model.spec.height != model.spec.width {
        bail!("the world simulator draws square frames; this model is {}x{}", model.spec.width, model.spec.height);
    }
    let size = model.spec.width as i64;
    let rgb = WorldState::sample(seed).draw(size as usize);
    let frame = Tensor::from_slice(&rgb).view([1, size, size, 3]).permute([3, 0, 1, 2]).unsqueeze(0);
    Ok(frame.to_kind(Kind::Float) / 127.5 - 1.0)
}
