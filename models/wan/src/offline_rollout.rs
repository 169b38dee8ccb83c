//! The Wan world model rolled out with no server, from a frame the caller holds: a session of
//! its session pipeline ([`WorldSessions`]) driven by the family-neutral
//! [`fastvideo_pipeline::session::offline::rollout`]. The model's warm-up and the family's
//! tests roll out this way; commands go through the registry's `sessions` capability instead.

use std::sync::{Arc, Mutex};

use anyhow::Result;
use fastvideo_pipeline::session::{offline, SessionRequest};
use fastvideo_pipeline::{AdapterSet, ClassicCfg, LoopPolicies};
use fastvideo_request::VideoArtifact;
use tch::{Device, Tensor};

use crate::sessions::{FirstFrame, WorldSessions};
use crate::world::WorldModel;

/// Rolls out the first chunk (generated, or `first_frame` encoded: `[1, 3, 1, H, W]` in
/// [-1, 1]) and then one chunk per action (names as the model lists them) under `seed`, with
/// `adapters` on every chunk, calling `on_chunk` as each is decoded; answers the whole video.
#[allow(clippy::too_many_arguments)]
pub fn rollout(
    model: &Arc<WorldModel>,
    actions: &[String],
    prompt: &str,
    first_frame: Option<&Tensor>,
    seed: u64,
    device: Device,
    adapters: Option<Arc<AdapterSet>>,
    on_chunk: impl FnMut(&VideoArtifact),
) -> Result<VideoArtifact> {
    for a in actions {
        model.actions.index(a)?;
    }
    // The session draws its first frame by seed; this rollout brings the frame itself.
    let first = first_frame.map(|f| {
        let f = Mutex::new(f.shallow_clone());
        Arc::new(move |_seed: u64| Ok(f.lock().unwrap_or_else(|e| e.into_inner()).shallow_clone())) as FirstFrame
    });
    let policies = LoopPolicies::new(Arc::new(ClassicCfg));
    let sessions = WorldSessions::new("offline".into(), model.clone(), 1, device, policies, first)?;
    let asked = SessionRequest {
        prompt: Some(prompt.to_string()),
        start_seed: first_frame.map(|_| 0),
        seed,
        ..SessionRequest::default()
    };
    offline::rollout(&sessions, &asked, actions, device, adapters, on_chunk)
}

/// Rolls out a first chunk and one more, and drops them: the first work of a fresh process pays
/// for compiling kernels (NVRTC), cuBLAS and cuDNN plans at the session's shapes and the
/// allocator's first blocks, about half a second on an H200 at 480×832. A server does this once
/// when it loads the world model, so no session's first chunk pays it. Returns the seconds taken.
pub fn warm_up(model: &Arc<WorldModel>, device: Device) -> Result<f64> {
    let t = std::time::Instant::now();
    let action = model.actions.cfg.actions[0].clone();
    // Through the session pipeline, as sessions run; its frames come back on the host, so the
    // device is done when it returns and the time is the warm-up's, not the next caller's.
    rollout(model, &[action], &model.spec.prompt, None, 0, device, None, |_| {})?;
    Ok(t.elapsed().as_secs_f64())
}
