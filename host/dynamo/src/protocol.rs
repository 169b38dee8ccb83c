//! The Dynamo frontend's video and image protocol, mapped onto fastvideo's: requests
//! (`prompt, model, seconds, size, response_format, stream, nvext{...}`) become `OmniRequest`s
//! through the same parameter rules as `fastvideo serve`'s OpenAI API, and results become the
//! frontend's `NvVideosResponse` / images response. Errors are typed, so the frontend answers
//! with the right HTTP status (400 for a bad field, 529 when full, 503 while draining).

use dynamo_runtime::error::{BackendError, DynamoError, ErrorType};
use fastvideo_engine::EngineError;
use fastvideo_request::{ModelLimits, OmniRequest, TaskType};
use fastvideo_server::CreateParams;
use serde_json::{json, Map, Value};

/// Which model a request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `/v1/videos`.
    Videos,
    /// `/v1/images/generations`.
    Images,
}

/// A frontend request, ready for the engine.
#[derive(Debug)]
pub struct Parsed {
    /// One per image asked for (`n`), else one.
    pub requests: Vec<OmniRequest>,
    /// `stream: true`: progress items before the result.
    pub stream: bool,
    /// `url` (a file under the media folder) or `b64_json`.
    pub url: bool,
    /// The canary probe (`_HEALTH_CHECK`), answered at once.
    pub health_check: bool,
}

/// A typed error the frontend turns into an HTTP status; `public` is what the client reads.
pub fn error(kind: ErrorType, public: impl Into<String>) -> DynamoError {
    let public = public.into();
    DynamoError::builder().error_type(kind).message(public.clone()).public_message(public).build()
}

/// What the frontend answers for each engine refusal.
pub fn engine_error(e: &EngineError) -> DynamoError {
    let kind = match e {
        EngineError::Invalid(_) | EngineError::TooLarge { .. } | EngineError::Duplicate(_) => {
            ErrorType::Backend(BackendError::InvalidArgument)
        }
        EngineError::QueueFull { .. } => ErrorType::WorkerOverloaded,
        EngineError::Draining | EngineError::Stopped => ErrorType::Backend(BackendError::EngineShutdown),
        EngineError::Cancelled => ErrorType::Backend(BackendError::Cancelled),
        _ => ErrorType::Internal,
    };
    error(kind, format!("{}: {e}", e.code()))
}

fn invalid(message: impl Into<String>) -> DynamoError {
    error(ErrorType::Backend(BackendError::InvalidArgument), message)
}

/// Reads a frontend request. `nvext` fields join the top level under the names
/// `fastvideo serve` takes; fields the frontend adds for other backends are dropped.
pub fn parse(kind: Kind, v: &Value, id: &str, model: &str, limits: &ModelLimits) -> Result<Parsed, DynamoError> {
    let Some(obj) = v.as_object() else { return Err(invalid("the request is not a JSON object")) };
    let health_check = obj.contains_key("_HEALTH_CHECK");
    let mut flat = Map::new();
    for (k, val) in obj {
        match k.as_str() {
            "nvext" => {
                for (nk, nv) in val.as_object().into_iter().flatten() {
                    if nk != "annotations" && !nv.is_null() {
                        flat.insert(nk.clone(), nv.clone());
                    }
                }
            }
            // The frontend's own fields, or ones other backends read.
            "stream" | "output_format" | "user" | "extra_args" | "_HEALTH_CHECK" | "quality" | "background"
            | "moderation" | "style" | "output_compression" | "partial_images" => {}
            _ if val.is_null() => {}
            _ => {
                flat.insert(k.clone(), val.clone());
            }
        }
    }
    let url = match flat.remove("response_format").as_ref().and_then(Value::as_str) {
        None => kind == Kind::Videos,
        Some("url") => true,
        Some("b64_json") => false,
        Some(other) => return Err(invalid(format!("response_format: `{other}`; use url or b64_json"))),
    };
    let stream = obj.get("stream").and_then(Value::as_bool).unwrap_or(false) && kind == Kind::Videos;
    let n = flat.remove("n").map(|n| n.as_u64().filter(|&n| (1..=8).contains(&n)).ok_or(()));
    let n = match n {
        None => 1,
        Some(Ok(n)) => n,
        Some(Err(())) => return Err(invalid("n: must be a whole number from 1 to 8")),
    };
    let params: CreateParams =
        serde_json::from_value(Value::Object(flat)).map_err(|e| invalid(format!("request: {e}")))?;
    if params.webhook.is_some() {
        return Err(invalid("webhook: the Dynamo frontend answers the request itself; webhooks are fastvideo serve's"));
    }
    if params.preview_every.is_some() {
        return Err(invalid(
            "preview_every: previews stream from fastvideo serve; the Dynamo frontend passes no events",
        ));
    }
    // An images request with pictures in `image` is an edit (`/v1/images/edits`' body).
    let task = match kind {
        Kind::Videos => TaskType::T2v,
        Kind::Images if params.image.is_some() => TaskType::I2i,
        Kind::Images => TaskType::T2i,
    };
    let first = params.to_request(id.to_string(), task, model, limits).map_err(|e| {
        let body = e.body();
        invalid(body["error"]["message"].as_str().unwrap_or("invalid request").to_string())
    })?;
    let mut requests = Vec::with_capacity(n as usize);
    for i in 0..n {
        let mut r = first.clone();
        if i > 0 {
            r.request_id = format!("{id}-{i}");
            r.sampling.seed = first.sampling.seed.map(|s| s.wrapping_add(i));
        }
        requests.push(r);
    }
    Ok(Parsed { requests, stream, url, health_check })
}

/// Seconds since the epoch.
pub fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

/// A video item (`NvVideosResponse`); `data` is empty until the last.
pub fn video_item(id: &str, model: &str, created: i64, progress: u32, data: Vec<Value>) -> Value {
    let status = if progress >= 100 { "completed" } else { "in_progress" };
    json!({ "id": id, "object": "video", "model": model, "status": status, "progress": progress, "created": created, "data": data })
}

/// One finished video: a URL or inline base64, always with its `output_format`.
pub fn video_data(url: Option<String>, b64: Option<String>, fps: u32) -> Value {
    let mut d = json!({ "output_format": "mp4", "fps": fps });
    if let Some(u) = url {
        d["url"] = json!(u);
    }
    if let Some(b) = b64 {
        d["b64_json"] = json!(b);
    }
    d
}

/// The images response.
pub fn images_item(created: i64, data: Vec<Value>) -> Value {
    json!({ "created": created.max(0) as u32, "data": data, "output_format": "png" })
}

#[cfg(test)]
mod tests {
    use super::*;
    use fastvideo_request::{ImageRole, InputPart};

    fn limits() -> ModelLimits {
        ModelLimits::example()
    }

    #[test]
    fn the_frontends_fields_map_to_the_request() {
        let v = json!({
            "prompt": "a red circle", "model": "m", "seconds": 1, "size": "64x64", "response_format": "b64_json",
            "stream": true, "output_format": "mp4", "user": "u",
            "nvext": {"fps": 16, "negative_prompt": "blur", "num_inference_steps": 4, "guidance_scale": 3.5, "seed": 7, "annotations": ["x"]},
        });
        let p = parse(Kind::Videos, &v, "r1", "m", &limits()).unwrap();
        let r = &p.requests[0];
        assert!(p.stream && !p.url && !p.health_check);
        assert_eq!((r.diffusion.width, r.diffusion.height, r.diffusion.fps), (Some(64), Some(64), Some(16)));
        assert_eq!((r.diffusion.num_inference_steps, r.diffusion.guidance_scale), (Some(4), Some(3.5)));
        assert_eq!((r.sampling.seed, r.diffusion.negative_prompt.as_deref()), (Some(7), Some("blur")));
        assert_eq!(r.diffusion.num_frames, Some(17), "1 s at 16 fps, as 4k+1");
        assert_eq!(r.request_id, "r1");
    }

    #[test]
    fn bad_fields_are_invalid_arguments_naming_the_field() {
        let e = parse(Kind::Videos, &json!({"prompt": "x", "size": "big"}), "r", "m", &limits()).unwrap_err();
        assert_eq!(e.public_message(), Some("size: `big` is not WIDTHxHEIGHT (e.g. 64x64)"));
        assert_eq!(e.error_type(), ErrorType::Backend(BackendError::InvalidArgument));
        let e = parse(Kind::Videos, &json!({"prompt": "x", "model": "other"}), "r", "m", &limits()).unwrap_err();
        assert!(e.public_message().unwrap().contains("is not served here"));
        let e = parse(Kind::Images, &json!({"prompt": "x", "n": 40}), "r", "m", &limits()).unwrap_err();
        assert!(e.public_message().unwrap().starts_with("n:"));
        for field in ["webhook", "preview_every", "actions"] {
            let value = match field {
                "webhook" => json!("https://h.example/"),
                "actions" => json!(["up"]),
                _ => json!(2),
            };
            let body = json!({"prompt": "x", field: value});
            let e = parse(Kind::Videos, &body, "r", "m", &limits()).unwrap_err();
            assert!(e.public_message().unwrap().starts_with(&format!("{field}:")), "{field}");
        }
    }

    #[test]
    fn images_take_n_with_consecutive_seeds() {
        let p =
            parse(Kind::Images, &json!({"prompt": "x", "n": 3, "nvext": {"seed": 10}}), "r", "m", &limits()).unwrap();
        let seeds: Vec<_> = p.requests.iter().map(|r| r.sampling.seed).collect();
        assert_eq!(seeds, [Some(10), Some(11), Some(12)]);
        assert_eq!(p.requests[1].request_id, "r-1");
        assert!(!p.url && !p.stream, "images are inline and never streamed");
        assert_eq!(p.requests[0].task, TaskType::T2i);
    }

    #[test]
    fn an_images_request_with_pictures_is_an_edit_of_each_picture() {
        let png = "data:image/png;base64,iVBORw0KGgo=";
        let body = json!({"prompt": "x", "image": [png, png], "n": 2});
        let p = parse(Kind::Images, &body, "r", "m", &limits()).unwrap();
        assert_eq!(p.requests.len(), 2);
        for r in &p.requests {
            assert_eq!(r.task, TaskType::I2i);
            let refs = r.inputs.iter().filter(|i| matches!(i, InputPart::Image { role: ImageRole::Reference, .. }));
            assert_eq!(refs.count(), 2);
        }
        let e =
            parse(Kind::Images, &json!({"prompt": "x", "image": png, "mask": png}), "r", "m", &limits()).unwrap_err();
        assert!(e.public_message().unwrap().starts_with("mask:"));
    }

    #[test]
    fn engine_refusals_map_to_the_frontends_statuses() {
        assert_eq!(engine_error(&EngineError::QueueFull { queued: 3 }).error_type(), ErrorType::WorkerOverloaded);
        assert_eq!(engine_error(&EngineError::Draining).error_type(), ErrorType::Backend(BackendError::EngineShutdown));
    }
}
