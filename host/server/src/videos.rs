//! `/v1/videos`: OpenAI's asynchronous video jobs.

use axum::extract::{Path, Query, Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use fastvideo_request::TaskType;
use serde::Deserialize;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::job::{Status, VideoObject};
use crate::params::{read_body, CreateParams};
use crate::state::AppState;

/// Admits a video job and starts following it; shared by HTTP and WebSocket.
pub fn create(s: &AppState, p: &CreateParams, who: Caller) -> Result<VideoObject, ApiError> {
    s.jobs.check_space()?;
    s.keys.check_priority(who, p.priority)?;
    let webhook = p.webhook.as_deref().map(|url| s.jobs.check_webhook(url)).transpose()?;
    let id = s.new_id("video");
    let uploads = |file_id: &str, field: &str| s.files.base64_of(file_id, &s.keys.owner_tag(who), field);
    let (model, limits) = s.model_for(p.model.as_deref())?;
    let mut r = p.to_request_with_uploads(id, TaskType::T2v, &model, &limits, &uploads)?;
    r.model = (model != s.engine.model_id()).then(|| model.clone());
    let names = crate::params::MediaNames::of(&r);
    let handle = s.engine.submit(r.clone()).map_err(|e| names.rename(e))?;
    // Stored with the drawn seed, so a job run again after a restart makes the same video.
    r.sampling.seed = Some(handle.request.seed);
    let q = &handle.request;
    let warnings = s.prompt_warnings(&model, q);
    let shape = [q.width, q.height, q.num_frames, q.fps];
    let queued = VideoObject::queued(handle.request_id.clone(), model, q.prompt.clone(), q.seed, shape);
    let audio_sample_rate = limits.audio.filter(|_| q.generate_sound).map(|a| a.sample_rate);
    let video =
        VideoObject { predicted_seconds: handle.predicted_seconds, webhook, warnings, audio_sample_rate, ..queued };
    if let Err(e) = s.jobs.insert(video.clone(), who, s.keys.owner_tag(who), Some(r)) {
        s.engine.cancel(&video.id);
        return Err(e);
    }
    tokio::spawn(s.jobs.clone().follow(handle, fastvideo_media::mp4_bytes_with_audio));
    Ok(video)
}

/// The longest `Prefer: wait` honoured, in seconds.
pub const MAX_WAIT_SECONDS: u64 = 600;

/// `Prefer: wait=N` (RFC 7240): how long the client will wait for the job to finish. Other
/// preferences are ignored, as the RFC allows; a malformed or too long wait is a 400 naming
/// `Prefer`.
pub fn prefer_wait(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    let mut wait = None;
    for value in headers.get_all("prefer") {
        let text = value.to_str().map_err(|_| ApiError::field("Prefer", "Prefer: not visible ASCII"))?;
        for pref in text.split(',') {
            // A preference is `token [= value] *( ";" parameter )`; parameters do not apply here.
            let head = pref.split(';').next().unwrap_or_default().trim();
            let (name, value) = head.split_once('=').map_or((head, None), |(n, v)| (n.trim(), Some(v.trim())));
            if !name.eq_ignore_ascii_case("wait") {
                continue;
            }
            let raw = value.unwrap_or_default().trim_matches('"');
            let n: u64 = raw
                .parse()
                .map_err(|_| ApiError::field("Prefer", format!("Prefer: wait=`{raw}`: a whole number of seconds")))?;
            if n > MAX_WAIT_SECONDS {
                return Err(ApiError::field("Prefer", format!("Prefer: wait={n}: at most {MAX_WAIT_SECONDS} seconds")));
            }
            wait = Some(n);
        }
    }
    Ok(wait)
}

/// The job once it has ended, or as it stands when `seconds` run out: woken by each of its
/// events, and every 100 ms in case an event was missed.
async fn wait_for_end(s: &AppState, id: &str, who: Caller, seconds: u64) -> Option<VideoObject> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(seconds);
    let mut rx = s.jobs.subscribe(id, who).and_then(|(_, rx)| rx);
    loop {
        let job = s.jobs.get(id, who)?;
        let now = tokio::time::Instant::now();
        if job.ended() || now >= deadline {
            return Some(job);
        }
        let tick = tokio::time::sleep((deadline - now).min(std::time::Duration::from_millis(100)));
        match rx.as_mut() {
            Some(r) => {
                tokio::select! {
                    ev = r.recv() => if matches!(ev, Err(tokio::sync::broadcast::error::RecvError::Closed)) { rx = None },
                    _ = tick => {}
                }
            }
            None => tick.await,
        }
    }
}

pub async fn create_video(
    State(s): State<AppState>,
    Extension(who): Extension<Caller>,
    req: Request,
) -> Result<Response, ApiError> {
    let wait = prefer_wait(req.headers())?;
    let p: CreateParams = read_body(req).await?;
    if p.n.is_some() || p.response_format.is_some() {
        let f = if p.n.is_some() { "n" } else { "response_format" };
        return Err(ApiError::field(f, format!("{f}: only for /v1/images/generations")));
    }
    let video = match crate::causal::is_causal(&s, &p) {
        true => crate::causal::create(&s, &p, who).await?,
        false => create(&s, &p, who)?,
    };
    match wait.filter(|&n| n > 0) {
        None => Ok(Json(video).into_response()),
        Some(n) => {
            let id = video.id.clone();
            let job = wait_for_end(&s, &id, who, n).await.unwrap_or(video);
            Ok(([("preference-applied", format!("wait={n}"))], Json(job)).into_response())
        }
    }
}

fn not_found(id: &str) -> ApiError {
    ApiError::NotFound { what: format!("video `{id}`") }
}

pub async fn get_video(
    State(s): State<AppState>,
    Extension(who): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<VideoObject>, ApiError> {
    s.jobs.get(&id, who).map(Json).ok_or_else(|| not_found(&id))
}

#[derive(Deserialize)]
pub struct ContentQuery {
    variant: Option<String>,
    /// `1`: a causal job's fragmented MP4 as its chunks finish.
    stream: Option<String>,
}

pub async fn video_content(
    State(s): State<AppState>,
    Extension(who): Extension<Caller>,
    Path(id): Path<String>,
    Query(q): Query<ContentQuery>,
) -> Result<Response, ApiError> {
    if let Some(v) = q.variant.as_deref().filter(|v| *v != "video") {
        return Err(ApiError::field("variant", format!("variant: `{v}` is not served; only `video`")));
    }
    let (video, mp4) = s.jobs.content(&id, who).ok_or_else(|| not_found(&id))?;
    match q.stream.as_deref() {
        None | Some("0") | Some("false") => {}
        Some("1") | Some("true") => {
            let causal = s.engine.session_model().is_some_and(|m| m.id() == video.model);
            let body = s.jobs.live.body(&id).ok_or_else(|| match causal {
                // Its stream lived in the process that made it.
                true => ApiError::Conflict {
                    code: "stream_gone".into(),
                    message: format!("the stream of video `{id}` is gone (the server restarted); GET its content"),
                },
                false => ApiError::field("stream", format!("stream: video `{id}` is not a causal (world-model) job")),
            })?;
            return Ok(([(CONTENT_TYPE, "video/mp4")], body).into_response());
        }
        Some(other) => return Err(ApiError::field("stream", format!("stream: `{other}` is not 1 or 0"))),
    }
    match (video.status, mp4) {
        (Status::Completed, Some(mp4)) => match mp4.bytes().await {
            Ok(bytes) => Ok(([(CONTENT_TYPE, "video/mp4")], bytes).into_response()),
            Err(e) => Err(ApiError::Internal {
                code: "storage_failed".into(),
                message: format!("reading the stored video `{id}`: {e}"),
            }),
        },
        (Status::Failed, _) => Err(ApiError::Conflict {
            code: "video_failed".into(),
            message: format!("video `{id}` failed: {}", video.error.map(|e| e.message).unwrap_or_default()),
        }),
        _ => Err(ApiError::Conflict {
            code: "video_not_ready".into(),
            message: format!("video `{id}` is {:?} ({} %); poll GET /v1/videos/{id}", video.status, video.progress),
        }),
    }
}

#[derive(Deserialize)]
pub struct ListQuery {
    after: Option<String>,
    limit: Option<usize>,
    order: Option<String>,
}

pub async fn list_videos(
    State(s): State<AppState>,
    Extension(who): Extension<Caller>,
    Query(q): Query<ListQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let limit = q.limit.unwrap_or(20);
    if !(1..=100).contains(&limit) {
        return Err(ApiError::field("limit", "limit: must be between 1 and 100"));
    }
    let desc = match q.order.as_deref() {
        None | Some("desc") => true,
        Some("asc") => false,
        Some(o) => return Err(ApiError::field("order", format!("order: `{o}` is not asc or desc"))),
    };
    let (page, has_more) = s
        .jobs
        .list(q.after.as_deref(), limit, desc, who)
        .ok_or_else(|| ApiError::field("after", "after: no video with this id"))?;
    Ok(Json(serde_json::json!({
        "object": "list",
        "first_id": page.first().map(|v| v.id.clone()),
        "last_id": page.last().map(|v| v.id.clone()),
        "has_more": has_more,
        "data": page,
    })))
}

/// Cancels the job if it is still queued or running, then forgets it.
pub async fn delete_video(
    State(s): State<AppState>,
    Extension(who): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    s.jobs.get(&id, who).ok_or_else(|| not_found(&id))?;
    // A causal job runs as a session: closing it ends the job (failed, as a cancelled one).
    let cancelled = s.engine.cancel(&id) || s.engine.close_session(&id, "its job was deleted");
    s.jobs.live.forget(&id);
    s.jobs.remove(&id, who);
    Ok(Json(serde_json::json!({"id": id, "object": "video.deleted", "deleted": true, "cancelled": cancelled})))
}
