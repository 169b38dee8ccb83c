//! Request bodies of the OpenAI-compatible endpoints, read from JSON or multipart form data, and
//! their translation into an [`OmniRequest`]. Every parse error names the field.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{FromRequest, Multipart, Request};
use axum::http::header::CONTENT_TYPE;
use fastvideo_request::{number_f32, ImageRole, InputPart, ModelLimits, OmniRequest, SamplerKind, TaskType};
use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::error::ApiError;
use crate::listener::BodyTimeout;

mod body;
mod form;
mod media;

pub(crate) use body::{too_large, unreadable, BodyLimit};
use form::{form_value, insert_form_field, unknown_field};
use media::no_uploads;
pub use media::{MediaNames, MediaValue, Uploads};

/// Fields of `POST /v1/videos` and `POST /v1/images/generations`: OpenAI's, then ours.
///
/// Why the diffusion fields are spelled again here rather than flattened from
/// `DiffusionParams`: this is OpenAI's flat wire shape, read from JSON *and* multipart forms,
/// and serde cannot combine `flatten` with `deny_unknown_fields` (an unknown field would no
/// longer be named). [`video_request_from_json`] maps it onto `OmniRequest` in one place.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateParams {
    /// What to generate.
    pub prompt: Option<String>,
    /// The served model to run (the primary when absent).
    pub model: Option<String>,
    /// Video length in seconds, as OpenAI sends it (a string such as "4").
    pub seconds: Option<SecondsValue>,
    /// `WIDTHxHEIGHT`.
    pub size: Option<String>,
    /// Images only: how many (each with the next seed).
    pub n: Option<u32>,
    /// Images only: `b64_json` (the only format served).
    pub response_format: Option<String>,
    /// Seed of the initial noise; drawn when absent (the job records it).
    pub seed: Option<u64>,
    /// Denoise steps; the model's default when absent.
    pub num_inference_steps: Option<u32>,
    /// Classifier-free guidance scale; the model's default when absent.
    pub guidance_scale: Option<f32>,
    /// Two-expert models (Wan 2.2 A14B): the low-noise expert's guidance scale.
    pub guidance_scale_2: Option<f32>,
    /// Two-expert models: where the low-noise expert takes over, as a fraction of 1000
    /// timesteps, in [0, 1].
    pub boundary_ratio: Option<f32>,
    /// Two-expert models: the low-noise expert from this step on (instead of boundary_ratio).
    pub switch_step: Option<u32>,
    /// Models that make sound with their picture (LTX-2): the audio stream's guidance scale.
    pub audio_guidance_scale: Option<f32>,
    /// LTX-2: spatio-temporal guidance of the video, and of the audio.
    pub stg_scale: Option<f32>,
    /// See `stg_scale`.
    pub audio_stg_scale: Option<f32>,
    /// LTX-2: modality guidance of the video, and of the audio.
    pub modality_scale: Option<f32>,
    /// See `modality_scale`.
    pub audio_modality_scale: Option<f32>,
    /// LTX-2: the rescale of the video's guided estimate, and of the audio's.
    pub guidance_rescale: Option<f32>,
    /// See `guidance_rescale`.
    pub audio_guidance_rescale: Option<f32>,
    /// A partial schedule: its first step (from the request's latents, as they are) and the
    /// step it stops before (its latents keep their leftover noise).
    pub start_step: Option<u32>,
    /// The step a partial schedule stops before (see `start_step`).
    pub end_step: Option<u32>,
    /// An explicit schedule for a distilled model: training-grid points, descending in
    /// (0, 1000] (`[1000, 750, 500, 250]`); sets the step count.
    pub timesteps: Option<Vec<f64>>,
    /// `timesteps` divided by 1000 (noise levels in (0, 1]); one of the two.
    pub sigmas: Option<Vec<f64>>,
    /// The `rcm` sampler's initial noise level in TrigFlow's σ (80 when absent).
    pub sigma_max: Option<f64>,
    /// The precision preset the client expects (exact, bf16, fast); a 400 unless the server runs
    /// it.
    pub precision: Option<String>,
    /// What guidance steers away from; the model's default when absent.
    pub negative_prompt: Option<String>,
    /// Output width in pixels (instead of `size`).
    pub width: Option<u32>,
    /// Output height in pixels (instead of `size`).
    pub height: Option<u32>,
    /// Frames to generate (instead of `seconds`).
    pub num_frames: Option<u32>,
    /// Frames per second of the output video.
    pub fps: Option<u32>,
    /// Flow-matching timestep shift; the model's default when absent.
    pub shift: Option<f32>,
    /// `euler` or `unipc` (the model's default when absent).
    pub sampler: Option<SamplerKind>,
    /// Higher runs first when the scheduler has a choice; bounded per API key.
    pub priority: Option<i32>,
    /// `/v1/videos`: a `preview` event (a small JPEG of the current estimate) every this many
    /// denoise steps.
    pub preview_every: Option<u32>,
    /// Exact mode: refuse anything that alters the sampled distribution.
    pub exact: Option<bool>,
    /// Rewrite the prompt with the model's prompt extender before it is encoded; the job
    /// records the prompt used as `extended_prompt`.
    pub prompt_extend: Option<bool>,
    /// `/v1/videos`: make the clip's sound (an AAC track in the MP4); absent: what the model
    /// does (sound when it makes any). `true` on a model without sound is a 400 naming it.
    pub generate_sound: Option<bool>,
    /// A causal job (`model` the served world model): one action per chunk after the first.
    pub actions: Option<Vec<String>>,
    /// An action model's conditioning (diffusers' `CosmosActionCondition` fields: `mode` —
    /// `policy`, `forward_dynamics` or `inverse_dynamics`; `domain_name`, `chunk_size`,
    /// `resolution_tier`, `view_point`, `raw_actions`), with `input_reference` or `video` as
    /// its clip. Without `mode`: forward dynamics with `raw_actions`, inverse with a `video`,
    /// else policy.
    pub action: Option<serde_json::Value>,
    /// Parameters for plugins the deploy enabled, keyed by plugin name.
    #[serde(default)]
    pub plugin_params: BTreeMap<String, serde_json::Value>,
    /// Per-node parameters, `{node: {key: value}}` (LTX-2: `refine`, the two-stage recipe),
    /// checked against the node's schema at admission.
    #[serde(default)]
    pub node_params: BTreeMap<String, serde_json::Value>,
    /// Reward plugins (enabled by the deploy) to score the result with.
    #[serde(default)]
    pub rewards: Vec<String>,
    /// LoRA adapters (enabled by the deploy) to run with: `[{"name": ..., "scale": ...}]`. Forms
    /// send it as that JSON, or as `lora[0][name]`, `lora[0][scale]`, ... fields.
    pub lora: Option<serde_json::Value>,
    /// Image to video: the first frame (PNG, JPEG or WebP), as OpenAI's client uploads it (a
    /// multipart file) or in JSON as a `data:` URL or plain base64.
    pub input_reference: Option<MediaValue>,
    /// First-and-last-frame models: the last frame, as `input_reference`.
    pub last_frame: Option<MediaValue>,
    /// `/v1/images/edits`: the pictures to edit or draw from, as the openai client uploads
    /// them (`image`, or `image[]` for several), or in JSON as data URLs, base64 or upload
    /// ids (one, or a list).
    pub image: Option<MediaList>,
    /// `/v1/images/edits`: OpenAI's inpainting mask (not served; a 400 naming it).
    pub mask: Option<MediaValue>,
    /// Video to video: the input video (MP4, H.264), as `input_reference`.
    pub video: Option<MediaValue>,
    /// Video to video: the part of the schedule run on the noised video, in (0, 1].
    pub strength: Option<f64>,
    /// How `input_reference`, `last_frame` or `video` of another aspect fit the output:
    /// `stretch` (diffusers' default), `crop` or `pad`.
    pub resize_mode: Option<fastvideo_request::ResizeMode>,
    /// `/v1/videos`: a URL told when the job ends (on the operator's allowlist), signed per
    /// Standard Webhooks.
    pub webhook: Option<String>,
    /// Accepted from OpenAI clients; no effect here.
    #[allow(dead_code)]
    pub user: Option<String>,
    /// Accepted from OpenAI clients; no effect here.
    #[allow(dead_code)]
    pub quality: Option<String>,
    /// Accepted from OpenAI clients; no effect here.
    #[allow(dead_code)]
    pub style: Option<String>,
}

/// One picture or several.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum MediaList {
    /// One picture.
    One(MediaValue),
    /// Several, in order.
    Many(Vec<MediaValue>),
}

impl MediaList {
    fn items(&self) -> Vec<&MediaValue> {
        match self {
            MediaList::One(v) => vec![v],
            MediaList::Many(list) => list.iter().collect(),
        }
    }
}

/// `seconds` arrives as a string from OpenAI clients and as a number from others.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum SecondsValue {
    /// A number of seconds.
    Number(f64),
    /// A number as a string, as OpenAI's client sends it.
    Text(String),
}

/// Reads a JSON or multipart body into `T`, naming the offending field on failure.
pub async fn read_body<T: DeserializeOwned>(req: Request) -> Result<T, ApiError> {
    // A client that sends its head and then trickles (or withholds) the body gets a 408 at the
    // server's body deadline instead of holding the handler.
    let limit = req.extensions().get::<BodyTimeout>().map_or(Duration::from_secs(30), |b| b.0);
    match tokio::time::timeout(limit, read_body_now(req)).await {
        Ok(r) => r,
        Err(_) => Err(ApiError::Rejected {
            status: axum::http::StatusCode::REQUEST_TIMEOUT,
            message: format!("the request body did not arrive within {} s", limit.as_secs_f64()),
        }),
    }
}

async fn read_body_now<T: DeserializeOwned>(req: Request) -> Result<T, ApiError> {
    let is_multipart = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("multipart/form-data"));
    let limit = req.extensions().get::<BodyLimit>().copied();
    let value = if is_multipart {
        let mut form = Multipart::from_request(req, &()).await.map_err(|e| unreadable("body", &e, limit))?;
        let mut map = serde_json::Map::new();
        while let Some(field) = form.next_field().await.map_err(|e| unreadable("body", &e, limit))? {
            let name = field.name().unwrap_or_default().to_string();
            let field_file_name = field.file_name().map(str::to_string);
            let is_file = field_file_name.is_some();
            let bytes = field.bytes().await.map_err(|e| unreadable(&name, &e, limit))?;
            let value = if is_file {
                // Kept as base64 until the request plane decodes it (with every check a JSON
                // client's data URL gets), so both wire forms take one path.
                use base64::Engine as _;
                let b64 = base64::engine::general_purpose::STANDARD.encode(&bytes);
                serde_json::json!({ "b64": b64, "file_name": field_file_name })
            } else {
                let text = String::from_utf8(bytes.to_vec())
                    .map_err(|_| ApiError::field(&name, "form field is not UTF-8 text"))?;
                form_value(&name, text)
            };
            insert_form_field(&mut map, &name, value)?;
        }
        serde_json::Value::Object(map)
    } else {
        let bytes = Bytes::from_request(req, &()).await.map_err(|e| unreadable("body", &e, limit))?;
        json_value(&bytes)?
    };
    decode(value)
}

fn json_value(bytes: &[u8]) -> Result<serde_json::Value, ApiError> {
    if bytes.is_empty() {
        return Err(ApiError::field("body", "empty body; send a JSON object"));
    }
    serde_json::from_slice(bytes).map_err(|e| ApiError::field("body", format!("not valid JSON: {e}")))
}

/// A `POST /v1/videos` JSON body to the engine request, exactly as the server reads it (for
/// embedders that take requests another way, and for the fuzz targets).
pub fn video_request_from_json(bytes: &[u8], limits: &ModelLimits) -> Result<OmniRequest, ApiError> {
    let p: CreateParams = decode(json_value(bytes)?)?;
    p.to_request("request".into(), TaskType::T2v, "model", limits)
}

/// The same for form fields (name, text), as a multipart body carries them.
pub fn video_request_from_form(fields: &[(&str, &str)], limits: &ModelLimits) -> Result<OmniRequest, ApiError> {
    let mut map = serde_json::Map::new();
    for (name, text) in fields {
        insert_form_field(&mut map, name, form_value(name, text.to_string()))?;
    }
    let p: CreateParams = decode(serde_json::Value::Object(map))?;
    p.to_request("request".into(), TaskType::T2v, "model", limits)
}

/// The same for a whole `multipart/form-data` body with `boundary`, read as the server reads a
/// request's (for the fuzz targets: the multipart framing, file parts, text fields, names).
pub fn video_request_from_multipart(
    body: &[u8],
    boundary: &str,
    limits: &ModelLimits,
) -> Result<OmniRequest, ApiError> {
    let req = Request::builder()
        .header(CONTENT_TYPE, format!("multipart/form-data; boundary={boundary}"))
        .body(axum::body::Body::from(body.to_vec()))
        .map_err(|e| ApiError::field("body", format!("not a request: {e}")))?;
    // A body already in memory waits on no I/O or timer: a bare current-thread runtime runs it.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|e| ApiError::field("body", format!("no runtime: {e}")))?;
    let p: CreateParams = runtime.block_on(read_body_now(req))?;
    p.to_request("request".into(), TaskType::T2v, "model", limits)
}

/// A JSON value to `T`, the error naming the field at fault.
fn decode<T: DeserializeOwned>(value: serde_json::Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        // An unknown field has no path yet; its name is in serde's message.
        let param = if path == "." { unknown_field(&inner).unwrap_or_else(|| "body".into()) } else { path };
        ApiError::field(&param, format!("{param}: {inner}"))
    })
}

impl CreateParams {
    /// The engine request for these parameters.
    pub fn to_request(
        &self,
        id: String,
        task: TaskType,
        served_model: &str,
        limits: &ModelLimits,
    ) -> Result<OmniRequest, ApiError> {
        self.to_request_with_uploads(id, task, served_model, limits, &no_uploads)
    }

    /// [`to_request`](Self::to_request) where media fields may name uploads (`file-…` ids).
    pub fn to_request_with_uploads(
        &self,
        id: String,
        task: TaskType,
        served_model: &str,
        limits: &ModelLimits,
        uploads: &Uploads,
    ) -> Result<OmniRequest, ApiError> {
        if self.actions.is_some() {
            return Err(ApiError::field(
                "actions",
                "actions: only for a world model's causal job (POST /v1/videos naming the world model)",
            ));
        }
        let prompt = self.prompt.clone().filter(|p| !p.trim().is_empty());
        let prompt = prompt.ok_or_else(|| ApiError::field("prompt", "prompt: required, and must not be empty"))?;
        if let Some(m) = &self.model {
            if m != served_model {
                return Err(ApiError::field(
                    "model",
                    format!("model: `{m}` is not served here; this server serves `{served_model}` (GET /v1/models)"),
                ));
            }
        }
        let mut r = OmniRequest::text_to_video(id, prompt);
        r.task = task;
        // Conditioning media set the task; the request plane decodes and checks them once, at
        // admission (a bad picture is an error naming `inputs[i]`, which [`MediaNames`] turns
        // back into the field the client sent), and refuses them on a model without the task.
        for (value, role, name) in [
            (&self.input_reference, ImageRole::FirstFrame, "input_reference"),
            (&self.last_frame, ImageRole::LastFrame, "last_frame"),
        ] {
            if let Some(v) = value {
                let b64 = v.resolve(name, uploads)?;
                r.task = TaskType::I2v;
                r.inputs.push(InputPart::Image { path: None, b64: Some(b64.into_owned()), role });
            }
        }
        if self.last_frame.is_some() && self.input_reference.is_none() {
            return Err(ApiError::field("last_frame", "last_frame: needs input_reference (the first frame) too"));
        }
        if let Some(v) = &self.video {
            if self.input_reference.is_some() {
                return Err(ApiError::field("video", "video: give input_reference or video, not both"));
            }
            let b64 = v.resolve("video", uploads)?;
            r.task = TaskType::V2v;
            r.inputs.push(InputPart::Video { path: None, b64: Some(b64.into_owned()) });
        }
        if let Some(v) = &self.action {
            let (mode, condition) = action_condition(v)?;
            r.task = match mode {
                Some(m) => m,
                None if condition.raw_actions.is_some() => TaskType::ForwardDynamics,
                None if self.video.is_some() => TaskType::InverseDynamics,
                None => TaskType::Policy,
            };
            r.diffusion.action = Some(condition);
        }
        if matches!(task, TaskType::T2i | TaskType::I2i) && r.task != task {
            return Err(ApiError::field("input_reference", "images take no input_reference or video here"));
        }
        if self.mask.is_some() {
            return Err(ApiError::field("mask", "mask: inpainting masks are not served; edits take `image` only"));
        }
        match (&self.image, task) {
            (Some(list), TaskType::I2i) => {
                let items = list.items();
                if items.is_empty() {
                    return Err(ApiError::field("image", "image: at least one picture to edit"));
                }
                for v in items {
                    let b64 = v.resolve("image", uploads)?;
                    r.inputs.push(InputPart::Image {
                        path: None,
                        b64: Some(b64.into_owned()),
                        role: ImageRole::Reference,
                    });
                }
            }
            (None, TaskType::I2i) => return Err(ApiError::field("image", "image: required (the picture to edit)")),
            (Some(_), _) => return Err(ApiError::field("image", "image: only for POST /v1/images/edits")),
            (None, _) => {}
        }
        r.diffusion.strength = self.strength;
        r.diffusion.resize_mode = self.resize_mode;
        let d = &mut r.diffusion;
        (d.width, d.height) = (self.width, self.height);
        if let Some(size) = &self.size {
            let parsed = size.split_once('x').and_then(|(w, h)| Some((w.trim().parse().ok()?, h.trim().parse().ok()?)));
            let Some((w, h)) = parsed else {
                return Err(ApiError::field("size", format!("size: `{size}` is not WIDTHxHEIGHT (e.g. 64x64)")));
            };
            d.width = d.width.or(Some(w));
            d.height = d.height.or(Some(h));
        }
        d.num_inference_steps = self.num_inference_steps;
        d.guidance_scale = self.guidance_scale;
        // Wan 2.2's flat knob aliases, as `diffusion.<name>` (the model's knob schema checks them).
        d.set_knob("guidance_scale_2", self.guidance_scale_2.map(number_f32));
        d.set_knob("boundary_ratio", self.boundary_ratio.map(number_f32));
        d.set_knob("switch_step", self.switch_step);
        // LTX-2's guidance per stream, as `diffusion.<name>`.
        for (name, v) in [
            ("audio_guidance_scale", self.audio_guidance_scale),
            ("stg_scale", self.stg_scale),
            ("audio_stg_scale", self.audio_stg_scale),
            ("modality_scale", self.modality_scale),
            ("audio_modality_scale", self.audio_modality_scale),
            ("guidance_rescale", self.guidance_rescale),
            ("audio_guidance_rescale", self.audio_guidance_rescale),
        ] {
            d.set_knob(name, v.map(number_f32));
        }
        (d.start_step, d.end_step) = (self.start_step, self.end_step);
        (d.timesteps, d.sigmas) = (self.timesteps.clone(), self.sigmas.clone());
        d.precision.clone_from(&self.precision);
        d.negative_prompt = self.negative_prompt.clone();
        d.fps = self.fps;
        d.shift = self.shift;
        d.num_frames = match task {
            TaskType::T2i | TaskType::I2i => Some(1),
            _ => match (self.num_frames, &self.seconds) {
                (Some(n), _) => Some(n),
                (None, Some(s)) => Some(frames_for_seconds(s, self.fps.unwrap_or(limits.defaults.fps), limits)?),
                (None, None) => None,
            },
        };
        r.sampling.seed = self.seed;
        r.sampling.sampler = self.sampler;
        r.sampling.sigma_max = self.sigma_max;
        r.plugin_params = self.plugin_params.clone();
        r.node_params = self.node_params.clone();
        r.outputs.rewards = self.rewards.clone();
        r.priority = self.priority.unwrap_or(0);
        if self.preview_every == Some(0) {
            return Err(ApiError::field("preview_every", "preview_every: at least 1 (a preview every N steps)"));
        }
        r.outputs.preview_every = self.preview_every;
        if self.generate_sound == Some(true)
            && (limits.audio.is_none() || matches!(task, TaskType::T2i | TaskType::I2i))
        {
            let message = match limits.audio {
                None => format!("generate_sound: this {} model makes no sound", limits.family),
                Some(_) => "generate_sound: images have no sound".to_string(),
            };
            return Err(ApiError::field("generate_sound", message));
        }
        r.outputs.generate_sound = self.generate_sound;
        r.exact = self.exact.unwrap_or(false);
        r.prompt_extend = self.prompt_extend.unwrap_or(false);
        r.lora = match &self.lora {
            Some(v) => lora_choices(v)?,
            None => Vec::new(),
        };
        Ok(r)
    }
}

/// The `lora` field: a list of `{name, scale}`, or the object a form's `lora[i][name]` fields
/// make (keys `0`, `1`, ... in order).
pub(crate) fn lora_choices(v: &serde_json::Value) -> Result<Vec<fastvideo_request::LoraChoice>, ApiError> {
    let items: Vec<&serde_json::Value> = match v {
        serde_json::Value::Array(a) => a.iter().collect(),
        serde_json::Value::Object(m) => {
            let mut keyed = Vec::new();
            for (k, item) in m {
                let i: usize = k.parse().map_err(|_| {
                    ApiError::field("lora", format!("lora: `{k}` is not an index (send a list of {{name, scale}})"))
                })?;
                keyed.push((i, item));
            }
            keyed.sort_by_key(|(i, _)| *i);
            keyed.into_iter().map(|(_, item)| item).collect()
        }
        _ => return Err(ApiError::field("lora", "lora: must be a list of {\"name\": ..., \"scale\": ...}")),
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            // `LoraChoice` reads a scale sent as text (forms) itself, refusing a non-finite one.
            serde_path_to_error::deserialize(item).map_err(|e| {
                let field = match e.path().to_string() {
                    p if p == "." => format!("lora[{i}]"),
                    p => format!("lora[{i}].{p}"),
                };
                ApiError::field(&field, format!("{field}: {}", e.into_inner()))
            })
        })
        .collect()
}

/// The frame count (`m·k + 1`) closest to `seconds` at `fps`.
fn frames_for_seconds(s: &SecondsValue, fps: u32, limits: &ModelLimits) -> Result<u32, ApiError> {
    let secs = match s {
        SecondsValue::Number(n) => Some(*n),
        SecondsValue::Text(t) => t.trim().parse().ok(),
    };
    let secs = secs
        .filter(|v: &f64| v.is_finite() && *v > 0.0)
        .ok_or_else(|| ApiError::field("seconds", "seconds: must be a positive number such as \"4\""))?;
    let Some(video) = &limits.video else {
        return Err(ApiError::field("seconds", format!("seconds: {} makes no video", limits.family)));
    };
    let m = video.frame_multiple.max(1) as f64;
    let k = ((secs * fps as f64 - 1.0) / m).round().max(0.0);
    let frames = k * m + 1.0;
    // In floating point until checked: a huge `seconds` must be an error, not an overflow.
    if frames > video.max_frames as f64 {
        return Err(ApiError::field(
            "seconds",
            format!(
                "seconds: {secs} s at {fps} fps is {frames:.0} frames; this model makes at most {} ({:.2} s)",
                video.max_frames,
                video.max_frames as f64 / fps.max(1) as f64
            ),
        ));
    }
    Ok(frames as u32)
}

#[cfg(test)]
mod tests;

/// `action`: its `mode` (an action task) and the rest as the request plane's condition; errors
/// name `action.<field>`.
fn action_condition(v: &serde_json::Value) -> Result<(Option<TaskType>, fastvideo_request::ActionCondition), ApiError> {
    let mut v = v.clone();
    let Some(map) = v.as_object_mut() else {
        return Err(ApiError::field("action", "action: must be an object (domain_name, chunk_size, ...)"));
    };
    let mode = match map.remove("mode") {
        None | Some(serde_json::Value::Null) => None,
        Some(m) => match serde_json::from_value::<TaskType>(m.clone()) {
            Ok(t) if fastvideo_request::is_action_task(t) => Some(t),
            _ => {
                return Err(ApiError::field(
                    "action",
                    format!("action.mode: {m} is not policy, forward_dynamics or inverse_dynamics"),
                ))
            }
        },
    };
    let condition = serde_json::from_value(v).map_err(|e| ApiError::field("action", format!("action: {e}")))?;
    Ok((mode, condition))
}
