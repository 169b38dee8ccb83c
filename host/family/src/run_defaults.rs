//! `fastvideo.json`: a folder's run defaults.

use std::path::Path;

use anyhow::{Context, Result};
use serde::Deserialize;

/// A file format (every field optional), so it cannot be `Defaults` (every field required): a
/// family's `limits` fills `Defaults` from it and the family's own values.
///
/// Optional `fastvideo.json` beside `model_index.json`: run defaults that diffusers keeps in
/// pipeline code rather than in the checkpoint (and the small defaults of the models this
/// project trains). Every field is optional; an unknown one is refused by name.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunDefaults {
    /// Denoise steps.
    pub steps: Option<u32>,
    /// Classifier-free guidance scale.
    pub guidance_scale: Option<f32>,
    /// Two-expert models: the low-noise expert's guidance scale (Wan 2.2 A14B's repository
    /// runs T2V at 4.0 / 3.0); absent: `guidance_scale`.
    pub guidance_scale_2: Option<f32>,
    /// Output height in pixels.
    pub height: Option<u32>,
    /// Output width in pixels.
    pub width: Option<u32>,
    /// Video frames.
    pub num_frames: Option<u32>,
    /// Frames per second of the output video.
    pub fps: Option<u32>,
    /// What guidance steers away from.
    pub negative_prompt: Option<String>,
    /// Text length the prompt is padded/truncated to (diffusers' `max_sequence_length`).
    pub max_sequence_length: Option<usize>,
    /// Free text shown to users (e.g. "random weights: output is noise").
    pub description: Option<String>,
    /// A distilled model's schedule: the training-grid points its steps start from
    /// (`[1000, 750, 500, 250]`), as `diffusion.timesteps` takes them.
    pub timesteps: Option<Vec<f64>>,
    /// The solver its requests default to (`dmd` for a DMD/LCM-distilled model); the scheduler
    /// config's otherwise.
    pub sampler: Option<fastvideo_request::SamplerKind>,
    /// Defaults of the model's own knobs (LTX-2's `audio_guidance_scale`, `stg_scale`, …), for a
    /// model trained to other settings than the reference pipeline's.
    #[serde(default)]
    pub knobs: std::collections::BTreeMap<String, serde_json::Value>,
}

impl RunDefaults {
    /// `schema` with this file's knob defaults, each checked (an error names the file and the
    /// knob).
    pub fn knob_schema(
        &self,
        schema: fastvideo_request::KnobSchema,
        dir: &Path,
    ) -> Result<fastvideo_request::KnobSchema> {
        schema.with_defaults(&self.knobs).map_err(|e| anyhow::anyhow!("{}: {e}", dir.join("fastvideo.json").display()))
    }

    /// `dir/fastvideo.json`, or every field absent when the folder has none.
    pub fn read(dir: &Path) -> Result<Self> {
        let path = dir.join("fastvideo.json");
        if !path.exists() {
            return Ok(Self::default());
        }
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("{}: not a run-defaults file", path.display()))
    }
}
