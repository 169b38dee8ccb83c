//! A world rollout with no server: one session of the session pipeline (the loop contract, as
//! the engine runs sessions) driven to its end in this thread. `fastvideo world`, `eval --world`
//! and the server's warm-up roll out this way, so what they measure and show is what sessions
//! run. Actions are queued up front, each from the first frame of the chunk it belongs to.

use std::sync::{Arc, Mutex};

use anyhow::{ensure, Result};
use fastvideo_pipeline::session::{ActionInbox, SessionModel, SessionRequest, ACTIONS};
use fastvideo_pipeline::{AdapterSet, CancelToken, PipelineRun, Value, Values, ADAPTERS};
use fastvideo_request::{ActionPart, OmniEvent, VideoArtifact};
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
    mut on_chunk: impl FnMut(&VideoArtifact),
) -> Result<VideoArtifact> {
    for a in actions {
        model.actions.index(a)?;
    }
    // The session draws its first frame by seed; an offline rollout brings the frame itself.
    let first = first_frame.map(|f| {
        let f = Mutex::new(f.shallow_clone());
        Arc::new(move |_seed: u64| Ok(f.lock().unwrap_or_else(|e| e.into_inner()).shallow_clone())) as FirstFrame
    });
    let policies = fastvideo_pipeline::LoopPolicies::new(Arc::new(fastvideo_pipeline::ClassicCfg));
    let sessions = WorldSessions::new("offline".into(), model.clone(), 1, device, policies, first)?;
    let asked = SessionRequest {
        prompt: Some(prompt.to_string()),
        start_seed: first_frame.map(|_| 0),
        seed,
        ..SessionRequest::default()
    };
    let request = sessions.request("offline", &asked).map_err(|e| anyhow::anyhow!("{e}"))?;
    let inbox = ActionInbox::default();
    let per_chunk = sessions.frames_per_chunk() as u64;
    for (i, name) in actions.iter().enumerate() {
        // Chunk 0 is the lone first frame; chunk i + 1 starts at frame 1 + i × per_chunk.
        inbox.push(ActionPart { from_frame: Some(1 + i as u64 * per_chunk), ..ActionPart::key(name, i as u64 + 1) });
    }
    let mut values = Values::default();
    values.insert(ACTIONS, Value::Inbox(inbox.clone()));
    if let Some(set) = adapters {
        values.insert(ADAPTERS, Value::Adapters(set));
    }
    let mut run = PipelineRun::new(sessions.pipeline(), request, device, values, CancelToken::default());
    let (want, mut videos) = (actions.len() + 1, Vec::with_capacity(actions.len() + 1));
    let mut on_event = |e: OmniEvent| {
        if let OmniEvent::Chunk { video, .. } = e {
            on_chunk(&video);
            videos.push(video);
            if videos.len() == want {
                inbox.close();
            }
        }
    };
    run.run_to_end(&mut on_event)?;
    run.finish(&mut on_event)?;
    ensure!(videos.len() == want, "the session ended after {} of {want} chunks", videos.len());
    let mut all = videos.remove(0);
    for v in videos {
        all.num_frames += v.num_frames;
        all.rgb.extend(v.rgb);
    }
    Ok(all)
}
