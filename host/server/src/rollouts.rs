//! `POST /v1/rollouts`: grouped RL rollouts, streamed per finished sample.
//!
//! The response is `application/x-fastvideo-rollout`: for each sample, in the order they finish,
//! an 8-byte little-endian length and that many bytes of a safetensors file
//! ([`RolloutSample::to_safetensors`]; zstd-compressed when the request says `"compress":
//! "zstd"`). A sample that fails is a safetensors file with no tensors whose metadata has
//! `error` and `code` beside its indices and seed; the others still come. The header
//! `x-rollout-samples` says how many records follow. A client that disconnects cancels the
//! samples not yet finished.

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::header::{HeaderName, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use fastvideo_engine::{Engine, RolloutRequest};
use std::collections::HashMap;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::params::read_body;
use crate::state::AppState;

/// The response's media type.
pub const ROLLOUT_MEDIA_TYPE: &str = "application/x-fastvideo-rollout";

/// Cancels the rollout's unfinished samples when the response is dropped (client gone).
struct CancelRest {
    engine: Engine,
    ids: Vec<String>,
}

impl Drop for CancelRest {
    fn drop(&mut self) {
        for id in &self.ids {
            self.engine.cancel(id);
        }
    }
}

fn record(bytes: Vec<u8>) -> Bytes {
    let mut out = Vec::with_capacity(bytes.len() + 8);
    out.extend((bytes.len() as u64).to_le_bytes());
    out.extend(bytes);
    Bytes::from(out)
}

pub async fn create_rollout(
    State(s): State<AppState>,
    Extension(who): Extension<Caller>,
    req: Request,
) -> Result<Response, ApiError> {
    let r: RolloutRequest = read_body(req).await?;
    s.keys.check_priority(who, Some(r.priority))?;
    let zstd = match r.compress.as_deref() {
        None | Some("none") => false,
        Some("zstd") => true,
        Some(other) => {
            return Err(ApiError::field("compress", format!("compress: `{other}` is not one of zstd, none")))
        }
    };
    let prefix = s.new_id("roll");
    let base_seed = u64::from_str_radix(&prefix[5..21], 16).unwrap_or(0);
    let rollout = s.engine.rollouts(&r, &prefix, base_seed)?;
    let total = rollout.total;
    let guard = CancelRest { engine: s.engine.clone(), ids: rollout.request_ids };
    let stream = futures_util::stream::unfold((rollout.samples, guard), move |(mut rx, guard)| async move {
        let item = rx.recv().await?;
        let bytes = tokio::task::spawn_blocking(move || -> Result<Vec<u8>, String> {
            let raw = match item {
                Ok(sample) => sample.to_safetensors().map_err(|e| e.to_string())?,
                Err(f) => {
                    let meta = HashMap::from([
                        ("prompt_index".to_string(), f.prompt_index.to_string()),
                        ("group_index".to_string(), f.group_index.to_string()),
                        ("seed".to_string(), f.seed.to_string()),
                        ("code".to_string(), f.error.code().to_string()),
                        ("error".to_string(), f.error.to_string()),
                    ]);
                    let none: Vec<(String, safetensors::tensor::TensorView)> = Vec::new();
                    safetensors::tensor::serialize(none, Some(meta)).map_err(|e| e.to_string())?
                }
            };
            if zstd {
                zstd::encode_all(&raw[..], 3).map_err(|e| e.to_string())
            } else {
                Ok(raw)
            }
        })
        .await;
        let msg = match bytes {
            Ok(Ok(b)) => return Some((Ok(record(b)), (rx, guard))),
            Ok(Err(msg)) => msg,
            Err(e) => e.to_string(),
        };
        // Ends the body with an error: the client sees a truncated stream, not a bad record.
        tracing::error!(error = %msg, "encoding a rollout sample");
        Some((Err(std::io::Error::other(msg)), (rx, guard)))
    });
    Ok((
        [
            (CONTENT_TYPE, ROLLOUT_MEDIA_TYPE.to_string()),
            (HeaderName::from_static("x-rollout-samples"), total.to_string()),
        ],
        Body::from_stream(stream),
    )
        .into_response())
}
