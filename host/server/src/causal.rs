//! Causal video as a job: `POST /v1/videos` naming the served world model runs one of its
//! sessions to a fixed length under a list of actions, as a video job. Each chunk, as it
//! finishes, becomes a fragmented-MP4 fragment that `GET /v1/videos/{id}/content?stream=1`
//! streams (the init segment first); the whole clip is the job's MP4 when it completes. The
//! session's events are turned into a job's (`progress` per chunk, then `done`), so the job
//! follows the same path as every other (record, history, store, webhook).

use axum::body::Bytes;
use fastvideo_engine::session::{SessionEvent, SessionRequest};
use fastvideo_engine::{EngineError, Handle};
use fastvideo_media::Fmp4Writer;
use fastvideo_request::{ActionPart, Artifact, OmniEvent, OmniOutput, RequestMetrics, VideoArtifact};
use tokio::sync::{mpsc, oneshot, watch};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::job::VideoObject;
use crate::live_streams::Fragments;
use crate::params::CreateParams;
use crate::state::AppState;

/// Chunks after the first when the request names no actions.
const DEFAULT_CHUNKS: usize = 8;
/// The most chunks one job may ask for.
const MAX_CHUNKS: usize = 256;
/// The node name a causal job's progress events carry.
const NODE: &str = "world";

/// Whether `p` names the served world model: a causal job.
pub fn is_causal(s: &AppState, p: &CreateParams) -> bool {
    matches!((&p.model, s.engine.session_model()), (Some(m), Some(w)) if m == w.id())
}

/// Admits a causal job (its session opened, its actions queued at their frames) and starts it.
pub async fn create(s: &AppState, p: &CreateParams, who: Caller) -> Result<VideoObject, ApiError> {
    s.jobs.check_space()?;
    let webhook = p.webhook.as_deref().map(|url| s.jobs.check_webhook(url)).transpose()?;
    let model = s.engine.session_model().cloned().ok_or_else(|| ApiError::from(EngineError::NoSessions))?;
    // A session takes its length from the actions, its size, rate and schedule from the model.
    let refused = [
        ("input_reference", p.input_reference.is_some()),
        ("last_frame", p.last_frame.is_some()),
        ("video", p.video.is_some()),
        ("lora", p.lora.is_some()),
        ("num_frames", p.num_frames.is_some()),
        ("seconds", p.seconds.is_some()),
        ("size", p.size.is_some()),
        ("width", p.width.is_some()),
        ("height", p.height.is_some()),
        ("fps", p.fps.is_some()),
        ("num_inference_steps", p.num_inference_steps.is_some()),
        ("guidance_scale", p.guidance_scale.is_some()),
        ("guidance_scale_2", p.guidance_scale_2.is_some()),
        ("boundary_ratio", p.boundary_ratio.is_some()),
        ("switch_step", p.switch_step.is_some()),
        ("start_step", p.start_step.is_some()),
        ("end_step", p.end_step.is_some()),
        ("negative_prompt", p.negative_prompt.is_some()),
        ("shift", p.shift.is_some()),
        ("sampler", p.sampler.is_some()),
        ("strength", p.strength.is_some()),
        ("resize_mode", p.resize_mode.is_some()),
        ("precision", p.precision.is_some()),
        ("rewards", !p.rewards.is_empty()),
        ("priority", p.priority.is_some_and(|n| n != 0)),
        ("preview_every", p.preview_every.is_some()),
        ("prompt_extend", p.prompt_extend == Some(true)),
    ];
    let fpc = model.frames_per_chunk() as u64;
    if let Some((field, _)) = refused.iter().find(|(_, given)| *given) {
        return Err(ApiError::field(
            field,
            format!(
                "{field}: not taken by the world model `{}` (a job of it is its first frame and {fpc} frames per \
                 action, at its own size and frame rate)",
                model.id()
            ),
        ));
    }
    let keys = model.actions();
    let first = keys.first().ok_or_else(|| ApiError::field("model", "model: this world model lists no actions"))?;
    let actions = p.actions.clone().unwrap_or_else(|| vec![first.clone(); DEFAULT_CHUNKS]);
    if actions.is_empty() || actions.len() > MAX_CHUNKS {
        return Err(ApiError::field("actions", format!("actions: 1 to {MAX_CHUNKS} (one per chunk after the first)")));
    }
    let mut parts = Vec::new();
    for (i, a) in actions.iter().enumerate() {
        let mut part = ActionPart::key(a, i as u64 + 1);
        // Chunk i + 1 starts at frame 1 + i · (frames per chunk): the action applies from there.
        part.from_frame = Some(1 + i as u64 * fpc);
        part.check(&keys, false).map_err(|e| ApiError::field("actions", format!("actions[{i}]: {}", e.rule)))?;
        parts.push(part);
    }
    let id = s.new_id("video");
    let seed = p.seed.unwrap_or_else(fastvideo_request::random_seed);
    let req = SessionRequest {
        prompt: p.prompt.clone().filter(|t| !t.is_empty()),
        start_seed: None,
        seed,
        window: None,
        exact: p.exact.unwrap_or(false),
        plugin_params: p.plugin_params.clone(),
        lora: Vec::new(),
    };
    let resolved = model.request(&id, &req).map_err(ApiError::from)?;
    let rx = s.engine.open_session(id.clone(), req).await?;
    s.engine.session_streaming(&id, true);
    for part in &parts {
        if let Err(e) = s.engine.session_action(&id, part) {
            s.engine.close_session(&id, "its job was refused");
            return Err(e.into());
        }
    }
    let chunks = actions.len() + 1;
    let frames = 1 + actions.len() as u32 * fpc as u32;
    let (width, height) = model.frame_size();
    // Sessions play in real time: the prediction is the clip's length.
    let shape = [width, height, frames, model.fps()];
    let queued = VideoObject::queued(id.clone(), model.id().to_string(), resolved.prompt.clone(), seed, shape);
    let video = VideoObject { webhook, ..queued };
    let seconds = video.predicted_seconds;
    if let Err(e) = s.jobs.insert(video.clone(), who, s.keys.owner_tag(who), None) {
        s.engine.close_session(&id, "its job was refused");
        return Err(e);
    }
    let live = s.jobs.live.open(&id);
    let (etx, erx) = mpsc::unbounded_channel();
    let (otx, orx) = oneshot::channel();
    let handle =
        Handle { request_id: id.clone(), request: resolved, predicted_seconds: seconds, events: erx, output: orx };
    tokio::spawn(run(s.engine.clone(), id, rx, chunks, live, etx, otx));
    tokio::spawn(s.jobs.clone().follow(handle, fastvideo_media::mp4_bytes));
    Ok(video)
}

/// Appends `piece`'s frames to `all`.
fn append(all: &mut Option<VideoArtifact>, piece: &VideoArtifact) {
    match all {
        None => *all = Some(piece.clone()),
        Some(v) => {
            v.rgb.extend_from_slice(&piece.rgb);
            v.num_frames += piece.num_frames;
        }
    }
}

/// Drives the session to `chunks` chunks: fragments to the live stream, the session's events as
/// the job's, the whole clip as its output.
async fn run(
    engine: fastvideo_engine::Engine,
    id: String,
    mut rx: mpsc::Receiver<SessionEvent>,
    chunks: usize,
    live: watch::Sender<Fragments>,
    events: mpsc::UnboundedSender<OmniEvent>,
    done: oneshot::Sender<Result<OmniOutput, EngineError>>,
) {
    let _ = events.send(OmniEvent::NodeStarted { request_id: id.clone(), node: NODE.into() });
    let started = std::time::Instant::now();
    let mut writer: Option<Fmp4Writer> = None;
    let mut all = None;
    let mut got = 0;
    let result = loop {
        match rx.recv().await {
            Some(SessionEvent::Chunk(c)) => {
                // A chunk the session dropped (its reader too slow) would leave a gap.
                if c.index != got as u64 {
                    break Err(format!("chunk {got} was dropped by the session (chunk {} came)", c.index));
                }
                let piece = c.video.clone();
                drop(c);
                let w = writer.take();
                let encoded = tokio::task::spawn_blocking(move || match w {
                    None => Fmp4Writer::start(&piece).map(|(w, init, first)| (w, vec![init, first], piece)),
                    Some(mut w) => w.push(&piece).map(|f| (w, vec![f], piece)),
                })
                .await;
                let (w, parts, piece) = match encoded {
                    Ok(Ok(x)) => x,
                    Ok(Err(e)) => break Err(format!("encoding chunk {got}: {e:#}")),
                    Err(e) => break Err(format!("encoding chunk {got}: {e}")),
                };
                writer = Some(w);
                live.send_modify(|f| f.parts.extend(parts.into_iter().map(Bytes::from)));
                append(&mut all, &piece);
                got += 1;
                let step = got as u32;
                let _ = events.send(OmniEvent::Progress {
                    request_id: id.clone(),
                    node: NODE.into(),
                    step,
                    total_steps: chunks as u32,
                });
                if got == chunks {
                    engine.close_session(&id, "the job has all its chunks");
                    break Ok(());
                }
            }
            Some(SessionEvent::Plugin(e)) => {
                let _ = events.send(e);
            }
            Some(SessionEvent::Closed { reason }) => {
                break Err(format!("the session ended after {got} chunks: {reason}"))
            }
            None => break Err(format!("the session ended after {got} chunks")),
        }
    };
    live.send_modify(|f| f.ended = true);
    let outcome = match (result, all) {
        (Ok(()), Some(video)) => {
            let metrics = RequestMetrics {
                steps: chunks as u32,
                total_seconds: started.elapsed().as_secs_f64(),
                ..Default::default()
            };
            let _ = events.send(OmniEvent::Done { request_id: id.clone(), metrics: metrics.clone() });
            let artifacts = [("video".to_string(), Artifact::Video(video))].into_iter().collect();
            Ok(OmniOutput { request_id: id, artifacts, metrics, rewards: Default::default(), extended_prompt: None })
        }
        (Ok(()), None) => Err(EngineError::Failed { code: "no_video".into(), message: "no chunk came".into() }),
        (Err(message), _) => {
            engine.close_session(&id, "its job failed");
            Err(EngineError::Failed { code: "session_failed".into(), message })
        }
    };
    // The follower reads the events to their end, then the output.
    drop(events);
    let _ = done.send(outcome);
}
