//! `POST /v1/images/generations` and `POST /v1/images/edits`: pictures, answered when done
//! (b64 PNG). `n` pictures are `n` requests submitted together, so the engine steps them as
//! one batch.

use axum::extract::{Request, State};
use axum::{Extension, Json};
use base64::Engine as _;
use fastvideo_request::TaskType;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::params::{read_body, CreateParams};
use crate::state::AppState;

const MAX_N: u32 = 8;

/// Text to image.
pub async fn generate_images(
    State(s): State<AppState>,
    Extension(who): Extension<Caller>,
    req: Request,
) -> Result<Json<serde_json::Value>, ApiError> {
    let p: CreateParams = read_body(req).await?;
    images(s, who, p, TaskType::T2i).await
}

/// Edits: the pictures in `image` (one or several) edited or drawn from by the prompt.
pub async fn edit_images(
    State(s): State<AppState>,
    Extension(who): Extension<Caller>,
    req: Request,
) -> Result<Json<serde_json::Value>, ApiError> {
    let p: CreateParams = read_body(req).await?;
    images(s, who, p, TaskType::I2i).await
}

async fn images(
    s: AppState,
    who: Caller,
    p: CreateParams,
    task: TaskType,
) -> Result<Json<serde_json::Value>, ApiError> {
    s.keys.check_priority(who, p.priority)?;
    if let Some(f) = p.response_format.as_deref().filter(|f| *f != "b64_json") {
        return Err(ApiError::field("response_format", format!("response_format: `{f}` is not served; use b64_json")));
    }
    let n = p.n.unwrap_or(1);
    if !(1..=MAX_N).contains(&n) {
        return Err(ApiError::field("n", format!("n: must be between 1 and {MAX_N}")));
    }
    if p.webhook.is_some() {
        return Err(ApiError::field("webhook", "webhook: images are answered when done; webhooks are for /v1/videos"));
    }
    if p.seconds.is_some() || p.num_frames.is_some() {
        let f = if p.seconds.is_some() { "seconds" } else { "num_frames" };
        return Err(ApiError::field(f, format!("{f}: images have one frame; use /v1/videos for video")));
    }
    let (model, limits) = s.model_for(p.model.as_deref())?;
    if task == TaskType::I2i && !limits.tasks.contains(&TaskType::I2i) {
        return Err(ApiError::field(
            "image",
            format!("image: model `{model}` ({}) makes pictures from text only; it does not edit", limits.family),
        ));
    }
    let uploads = |file_id: &str, field: &str| s.files.base64_of(file_id, &s.keys.owner_tag(who), field);
    let base = s.new_id("img");
    let mut handles = Vec::new();
    for i in 0..n {
        let mut r = p.to_request_with_uploads(format!("{base}_{i}"), task, &model, &limits, &uploads)?;
        r.model = (model != s.engine.model_id()).then(|| model.clone());
        // Sibling images take the next seeds (wrapping past u64::MAX, not overflowing).
        r.sampling.seed = p.seed.map(|seed| seed.wrapping_add(i as u64));
        let names = crate::params::MediaNames::of(&r);
        match s.engine.submit(r) {
            Ok(h) => handles.push(h),
            Err(e) => {
                // All or nothing: do not leave siblings running for a request that failed.
                for h in &handles {
                    s.engine.cancel(&h.request_id);
                }
                return Err(names.rename(e).into());
            }
        }
    }
    let mut data = Vec::new();
    for h in handles {
        let seed = h.request.seed;
        let out = h.wait().await?;
        let video = out.video().cloned().ok_or_else(|| ApiError::Internal {
            code: "no_image".into(),
            message: "the pipeline produced no image".into(),
        })?;
        let png = tokio::task::spawn_blocking(move || fastvideo_media::png_bytes(&video, 0))
            .await
            .map_err(|e| ApiError::Internal { code: "encode_failed".into(), message: e.to_string() })?
            .map_err(|e| ApiError::Internal { code: "encode_failed".into(), message: format!("{e:#}") })?;
        data.push(serde_json::json!({
            "b64_json": base64::engine::general_purpose::STANDARD.encode(png),
            "revised_prompt": null,
            "seed": seed,
        }));
    }
    Ok(Json(serde_json::json!({"created": crate::job::now_secs(), "data": data})))
}
