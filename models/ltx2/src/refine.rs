//! The two-stage recipe (LTX-2's `ti2vid_two_stages`, diffusers' two-stage example): the base
//! loop runs at half the size, the latent upsampler doubles its video latents, and a second
//! loop — `refine` — re-noises them to the first of its own short noise-level list and denoises
//! them at the full size, the audio latents carried over. A request asks for it with
//! `node_params.refine` (`--two-stage`); the node's parameters are checked against [`schema`]
//! at admission.

use std::sync::Arc;

use anyhow::{Context, Result};
use fastvideo_pipeline::{NodeCtx, Stage, Value, Values};
use fastvideo_request::ResolvedRequest;
use serde::Deserialize;
use tch::Kind;

use crate::latents::{denormalize_video, Statistics};
use crate::upsampler::Ltx2LatentUpsampler;
use crate::values::{LATENTS, UPSAMPLED};

/// The refine node's name, and the key of its parameters in `node_params`.
pub const REFINE: &str = "refine";

/// LTX-2's stage-two noise levels (`STAGE_2_DISTILLED_SIGMA_VALUES`), used as given.
pub const STAGE_2_SIGMAS: [f64; 3] = [0.909375, 0.725, 0.421875];

/// Whether `req` runs the two-stage recipe.
pub fn two_stage(req: &ResolvedRequest) -> bool {
    req.node_params.contains_key(REFINE)
}

/// `node_params.refine`, with the reference's stage-two defaults: its noise levels, re-noised to
/// the first of them, no guidance (the distilled stage-two weights need none).
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RefineParams {
    /// Noise levels, descending in (0, 1], used as given (no shift); a final 0 is appended.
    pub sigmas: Vec<f64>,
    /// How much fresh noise the upsampled latents get: `s·noise + (1 − s)·latents` (the
    /// pipeline's `noise_scale`); the first noise level when absent.
    pub noise_scale: Option<f64>,
    /// The video's classifier-free guidance scale.
    pub guidance_scale: f64,
    /// The audio's (0: the video's, as the pipeline reads it).
    pub audio_guidance_scale: f64,
    /// Spatio-temporal guidance of the video.
    pub stg_scale: f64,
    /// Of the audio (0: the video's).
    pub audio_stg_scale: f64,
    /// Modality guidance of the video.
    pub modality_scale: f64,
    /// Of the audio (0: the video's).
    pub audio_modality_scale: f64,
    /// Rescale of the video's guided estimate.
    pub guidance_rescale: f64,
    /// Of the audio's (0: the video's).
    pub audio_guidance_rescale: f64,
    /// The seed the fresh noise derives from in place of the request's (a ComfyUI workflow's
    /// second `RandomNoise`).
    pub seed: Option<u64>,
}

impl Default for RefineParams {
    fn default() -> Self {
        Self {
            sigmas: STAGE_2_SIGMAS.to_vec(),
            noise_scale: None,
            guidance_scale: 1.0,
            audio_guidance_scale: 1.0,
            stg_scale: 0.0,
            audio_stg_scale: 0.0,
            modality_scale: 1.0,
            audio_modality_scale: 1.0,
            guidance_rescale: 0.0,
            audio_guidance_rescale: 0.0,
            seed: None,
        }
    }
}

impl RefineParams {
    /// The request's, when it runs the two-stage recipe (checked against [`schema`] at
    /// admission; read again here).
    pub fn of(req: &ResolvedRequest) -> Result<Option<Self>> {
        req.node_params.get(REFINE).map(|v| serde_json::from_value(v.clone()).context("node_params.refine")).transpose()
    }

    /// Whether a pass needs the negative prompt.
    pub fn cfg(&self) -> bool {
        self.guidance_scale > 1.0 || self.audio_guidance_scale > 1.0
    }
}

/// The JSON Schema of `node_params.refine`.
pub fn schema() -> serde_json::Value {
    let scale = serde_json::json!({"type": "number", "minimum": 0, "maximum": 100});
    let unit = serde_json::json!({"type": "number", "minimum": 0, "maximum": 1});
    serde_json::json!({
        "type": "object",
        "properties": {
            "sigmas": {
                "type": "array", "minItems": 1, "maxItems": 100,
                "items": {"type": "number", "exclusiveMinimum": 0, "maximum": 1}
            },
            "noise_scale": unit,
            "guidance_scale": scale, "audio_guidance_scale": scale,
            "stg_scale": scale, "audio_stg_scale": scale,
            "modality_scale": scale, "audio_modality_scale": scale,
            "guidance_rescale": unit, "audio_guidance_rescale": unit,
            "seed": {"type": "integer", "minimum": 0}
        },
        "additionalProperties": false
    })
}

/// The base loop's node name, and the key of its parameters in `node_params`.
pub const DENOISE: &str = "denoise";

/// `node_params.denoise`: the base loop's noise levels as given (a ComfyUI workflow's
/// ManualSigmas), in place of the scheduler's shifted list for the request's step count.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BaseParams {
    /// Noise levels, descending in (0, 1], used as given; a final 0 is appended. As many as the
    /// request's steps; the loop starts from fresh noise scaled to the first level (`σ0·noise`,
    /// as a flow-matching sampler noises an empty latent).
    pub sigmas: Option<Vec<f64>>,
    /// The sound's length in seconds, when it is not the video's (ComfyUI's
    /// `LTXVEmptyLatentAudio` sizes it by its own frame count and rate).
    pub audio_seconds: Option<f64>,
}

impl BaseParams {
    /// The request's, if it gives any.
    pub fn of(req: &ResolvedRequest) -> Result<Option<Self>> {
        req.node_params
            .get(DENOISE)
            .map(|v| serde_json::from_value(v.clone()).context("node_params.denoise"))
            .transpose()
    }
}

/// The JSON Schema of `node_params.denoise`.
pub fn base_schema() -> serde_json::Value {
    serde_json::json!({
        "type": "object",
        "properties": {
            "sigmas": {
                "type": "array", "minItems": 1, "maxItems": 1000,
                "items": {"type": "number", "exclusiveMinimum": 0, "maximum": 1}
            },
            "audio_seconds": {"type": "number", "exclusiveMinimum": 0, "maximum": 3600}
        },
        "additionalProperties": false
    })
}

/// The base loop's video latents back to the VAE's scale, through the latent upsampler: the
/// refine loop's starting point (`UPSAMPLED`, un-normalised as the upsample pipeline returns it).
pub struct Upsample {
    /// The latent upsampler.
    pub upsampler: Arc<Ltx2LatentUpsampler>,
    /// The VAE's latent statistics.
    pub stats: Arc<Statistics>,
}

impl Stage for Upsample {
    fn run(&self, _ctx: &NodeCtx, values: &mut Values) -> Result<()> {
        let z = values.tensor(LATENTS)?;
        let (mean, std, scale) = &self.stats.video;
        let raw = denormalize_video(z, &mean.to_device(z.device()), &std.to_device(z.device()), *scale);
        let up = self.upsampler.forward(&raw.to_kind(self.upsampler.kind()))?;
        values.insert(UPSAMPLED, Value::Tensor(up.to_kind(Kind::Float)));
        Ok(())
    }
}
