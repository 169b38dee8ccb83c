//! Causal video as a job: `POST /v1/videos` naming the served world model runs one of its
//! sessions to a fixed length under a list of actions, as a video job. This file maps the
//! request's fields onto the engine's session job ([`fastvideo_engine::Engine::submit_session_job`],
//! which drives the session and answers a job's handle) and adds what is HTTP's alone: each
//! chunk, as it comes, becomes a fragmented-MP4 fragment that
//! `GET /v1/videos/{id}/content?stream=1` streams (the init segment first). The job itself
//! follows the same path as every other (record, history, store, webhook).

use axum::body::Bytes;
use fastvideo_engine::session::SessionRequest;
use fastvideo_engine::{EngineError, Handle};
use fastvideo_media::Fmp4Writer;
use fastvideo_request::{ActionPart, OmniEvent};
use tokio::sync::{mpsc, watch};

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
    let mut handle = s.engine.submit_session_job(id.clone(), req, &parts, 0.0).await?;
    let frames = 1 + actions.len() as u32 * fpc as u32;
    let (width, height) = model.frame_size();
    // Sessions play in real time: the prediction is the clip's length.
    let shape = [width, height, frames, model.fps()];
    let queued = VideoObject::queued(id.clone(), model.id().to_string(), handle.request.prompt.clone(), seed, shape);
    let video = VideoObject { webhook, ..queued };
    handle.predicted_seconds = video.predicted_seconds;
    if let Err(e) = s.jobs.insert(video.clone(), who, s.keys.owner_tag(who), None) {
        s.engine.close_session(&id, "its job was refused");
        return Err(e);
    }
    let handle = stream_fragments(s.engine.clone(), handle, s.jobs.live.open(&id));
    tokio::spawn(s.jobs.clone().follow(handle, fastvideo_media::mp4_bytes_with_audio));
    Ok(video)
}

/// `handle` with its chunks taken out of its events and encoded, in order, as fragmented-MP4
/// fragments on `live` (the stream ends with the events). A chunk that cannot be encoded ends
/// the session, and so the job, with the reason.
fn stream_fragments(engine: fastvideo_engine::Engine, mut handle: Handle, live: watch::Sender<Fragments>) -> Handle {
    let (tx, rx) = mpsc::unbounded_channel();
    let id = handle.request_id.clone();
    let mut events = std::mem::replace(&mut handle.events, rx);
    tokio::spawn(async move {
        let (mut writer, mut failed) = (None::<Fmp4Writer>, false);
        while let Some(ev) = events.recv().await {
            let OmniEvent::Chunk { index, video, .. } = ev else {
                let _ = tx.send(ev);
                continue;
            };
            if failed {
                continue;
            }
            let w = writer.take();
            let encoded = tokio::task::spawn_blocking(move || match w {
                None => Fmp4Writer::start(&video).map(|(w, init, first)| (w, vec![init, first])),
                Some(mut w) => w.push(&video).map(|f| (w, vec![f])),
            })
            .await;
            let error = match encoded {
                Ok(Ok((w, parts))) => {
                    writer = Some(w);
                    live.send_modify(|f| f.parts.extend(parts.into_iter().map(Bytes::from)));
                    continue;
                }
                Ok(Err(e)) => format!("{e:#}"),
                Err(e) => e.to_string(),
            };
            engine.close_session(&id, &format!("encoding chunk {index}: {error}"));
            failed = true;
        }
        live.send_modify(|f| f.ended = true);
    });
    handle
}
