//! An LTX-2 folder loaded: `model_index.json` (`LTX2Pipeline`), `tokenizer/`, `text_encoder/`
//! (Gemma 3), `connectors/`, `transformer/`, `vae/`, `audio_vae/`, `vocoder/`, `scheduler/`.

use std::path::Path;
use std::sync::Arc;

use anyhow::{ensure, Context, Result};
use fastvideo_family::RunDefaults;
use fastvideo_request::{
    AudioLimits, Defaults, Knob, KnobDefault, KnobKind, KnobSchema, ModelLimits, PictureLimits, SamplerKind, TaskType,
    VideoLimits,
};
use fastvideo_torch::weights::Weights;
use tch::{Device, Kind};

use crate::audio_vae::Ltx2AudioDecoder;
use crate::prompt::PromptEncoder;
use crate::schedule::Ltx2Schedule;
use crate::transformer::Ltx2Transformer;
use crate::upsampler::Ltx2LatentUpsampler;
use crate::video_encoder::Ltx2VideoEncoder;
use crate::video_vae::Ltx2VideoDecoder;
use crate::vocoder::Ltx2Vocoder;

/// The audio VAE's fixed compression: 4 latent frames and 4 mel bins to one.
pub const AUDIO_COMPRESSION: i64 = 4;

/// Latent shapes of a request.
#[derive(Clone, Copy, Debug)]
pub struct Geometry {
    /// Video latent channels.
    pub channels: i64,
    /// Frames per latent frame.
    pub temporal: i64,
    /// Pixels per latent cell.
    pub spatial: i64,
    /// Audio latent channels.
    pub audio_channels: i64,
    /// Mel bins of the audio VAE (the latents have a quarter).
    pub mel_bins: i64,
    /// Audio latent frames per second: sample rate / hop / 4.
    pub audio_rate: f64,
}

impl Geometry {
    /// Video latents `[C, F, H, W]` of `frames` frames of `height` × `width`.
    pub fn video(&self, frames: u32, height: u32, width: u32) -> [i64; 4] {
        let f = (frames as i64 - 1) / self.temporal + 1;
        [self.channels, f, height as i64 / self.spatial, width as i64 / self.spatial]
    }

    /// Audio latent frames for `frames` frames at `fps`: `round(duration · rate)`.
    pub fn audio_frames(&self, frames: u32, fps: f64) -> i64 {
        (frames as f64 / fps * self.audio_rate).round() as i64
    }

    /// Audio latents `[C, L, M/4]` for `audio_frames` frames.
    pub fn audio(&self, audio_frames: i64) -> [i64; 3] {
        [self.audio_channels, audio_frames, self.mel_bins / AUDIO_COMPRESSION]
    }
}

/// Every component of a loaded folder.
pub struct Ltx2Model {
    /// Tokenizer, Gemma 3 and the text connectors.
    pub prompts: Arc<PromptEncoder>,
    /// The audio-video transformer.
    pub transformer: Arc<Ltx2Transformer>,
    /// The video VAE's decoder.
    pub vae: Arc<Ltx2VideoDecoder>,
    /// Its encoder (image to video's first frame).
    pub encoder: Arc<Ltx2VideoEncoder>,
    /// The audio VAE's decoder.
    pub audio_vae: Arc<Ltx2AudioDecoder>,
    /// Mel spectrogram to waveform.
    pub vocoder: Arc<Ltx2Vocoder>,
    /// The noise levels.
    pub schedule: Arc<Ltx2Schedule>,
    /// The latent upsampler (`latent_upsampler/`), when the folder has one: the two-stage recipe.
    pub upsampler: Option<Arc<Ltx2LatentUpsampler>>,
    /// Latent shapes.
    pub geometry: Geometry,
    /// Bytes of every weight read (the text encoder's vision tower not included).
    pub bytes: u64,
    /// The folder's `fastvideo.json` (the pipeline's defaults where absent).
    pub run: RunDefaults,
    /// The knobs, with the folder's defaults where it sets them.
    pub knobs: KnobSchema,
}

/// The pipeline's `class_name` in `model_index.json`.
pub const PIPELINE_CLASS: &str = "LTX2Pipeline";

impl Ltx2Model {
    /// Loads `dir` onto `device`: the transformer and connectors in `kind`, the text encoder in
    /// `text_kind`, the VAEs and the vocoder in `vae_kind`.
    pub fn load(dir: &Path, device: Device, kinds: (Kind, Kind, Kind)) -> Result<Self> {
        let (kind, text_kind, vae_kind) = kinds;
        let index = dir.join("model_index.json");
        let text = std::fs::read_to_string(&index).with_context(|| format!("reading {}", index.display()))?;
        let v: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("{}: not valid JSON", index.display()))?;
        let class = v.get("_class_name").and_then(|c| c.as_str()).unwrap_or("");
        ensure!(class == PIPELINE_CLASS, "{}: `_class_name` {class:?} is not {PIPELINE_CLASS}", index.display());
        let run = RunDefaults::read(dir)?;
        let knobs = run.knob_schema(knobs(), dir)?;
        let max_len = run.max_sequence_length.unwrap_or(crate::prompt::MAX_SEQUENCE_LENGTH);
        let prompts = Arc::new(PromptEncoder::load(dir, device, kind, text_kind, max_len)?);
        let transformer = Arc::new(Ltx2Transformer::load(&dir.join("transformer"), device, kind)?);
        let vae = Arc::new(Ltx2VideoDecoder::load(&dir.join("vae"), device, vae_kind)?);
        let encoder = Arc::new(Ltx2VideoEncoder::load(&dir.join("vae"), device, vae_kind)?);
        let audio_vae = Arc::new(Ltx2AudioDecoder::load(&dir.join("audio_vae"), device, vae_kind)?);
        let vocoder = Arc::new(Ltx2Vocoder::load(&dir.join("vocoder"), device, vae_kind)?);
        let schedule = Arc::new(Ltx2Schedule::load(&dir.join("scheduler/scheduler_config.json"))?);
        let up_dir = dir.join("latent_upsampler");
        let upsampler = match up_dir.join("config.json").is_file() {
            true => {
                let u = Ltx2LatentUpsampler::load(&up_dir, device, kind)?;
                ensure!(
                    u.doubles_space(),
                    "{}: the two-stage recipe needs an upsampler that doubles rows and columns and keeps frames",
                    up_dir.join("config.json").display()
                );
                Some(Arc::new(u))
            }
            false => None,
        };
        let tc = &transformer.cfg;
        let (spatial, temporal) = vae.compression();
        ensure!(
            tc.patch_size == 1 && tc.patch_size_t == 1 && tc.audio_patch_size == 1 && tc.audio_patch_size_t == 1,
            "{}: patch sizes other than 1 are not supported (the published models use 1)",
            dir.join("transformer/config.json").display()
        );
        let ac = &audio_vae.cfg;
        let geometry = Geometry {
            channels: vae.cfg.latent_channels,
            temporal,
            spatial,
            audio_channels: ac.latent_channels,
            mel_bins: ac.mel_bins.unwrap_or(64),
            audio_rate: ac.sample_rate as f64 / ac.mel_hop_length as f64 / AUDIO_COMPRESSION as f64,
        };
        ensure!(
            tc.in_channels == geometry.channels
                && tc.audio_in_channels == geometry.audio_channels * geometry.mel_bins / AUDIO_COMPRESSION,
            "{}: the transformer takes {} video and {} audio channels; the VAEs give {} and {}",
            dir.display(),
            tc.in_channels,
            tc.audio_in_channels,
            geometry.channels,
            geometry.audio_channels * geometry.mel_bins / AUDIO_COMPRESSION
        );
        let bytes = ["transformer", "connectors", "vae", "audio_vae", "vocoder"]
            .iter()
            .map(|c| {
                weight_bytes(
                    &dir.join(c),
                    "diffusion_pytorch_model",
                    if *c == "transformer" || *c == "connectors" { kind } else { vae_kind },
                    "",
                )
            })
            .sum::<u64>()
            + weight_bytes(&dir.join("text_encoder"), "model", text_kind, "model.language_model")
            + weight_bytes(&dir.join("text_encoder"), "model", text_kind, "language_model.model");
        let bytes = bytes + weight_bytes(&up_dir, "diffusion_pytorch_model", kind, "");
        Ok(Self {
            prompts,
            transformer,
            vae,
            encoder,
            audio_vae,
            vocoder,
            schedule,
            upsampler,
            geometry,
            bytes,
            run,
            knobs,
        })
    }

    /// What requests it takes: text and image to video with sound; frames `8k + 1`, sides multiples of
    /// 32 (the pipeline's check); the pipeline's defaults (512×768, 121 frames at 24 fps, 30
    /// steps, guidance 3) unless the folder's `fastvideo.json` says otherwise, and its other
    /// scales as knobs.
    pub fn limits(&self) -> ModelLimits {
        let g = &self.geometry;
        let r = &self.run;
        ModelLimits {
            family: "LTX-2".into(),
            tasks: vec![TaskType::T2v, TaskType::I2v],
            image_roles: vec![fastvideo_request::ImageRole::FirstFrame, fastvideo_request::ImageRole::Keyframe],
            video: Some(VideoLimits { frame_multiple: g.temporal as u32, max_frames: 1 + g.temporal as u32 * 64 }),
            picture: Some(PictureLimits { spatial_multiple: 32.max(g.spatial as u32), max_side: 2048 }),
            audio: Some(AudioLimits {
                sample_rate: self.vocoder.sample_rate as u32,
                channels: self.vocoder.channels(),
            }),
            action: None,
            references: None,
            max_steps: 1000,
            defaults: Defaults {
                steps: r.steps.unwrap_or(30),
                guidance_scale: r.guidance_scale.unwrap_or(3.0),
                shift: 1.0,
                height: r.height.unwrap_or(512),
                width: r.width.unwrap_or(768),
                num_frames: r.num_frames.unwrap_or(121),
                fps: r.fps.unwrap_or(24),
                sampler: r.sampler.unwrap_or(SamplerKind::Euler),
                negative_prompt: r.negative_prompt.clone().unwrap_or_default(),
                timesteps: r.timesteps.clone(),
                knobs: self.knobs.clone(),
            },
        }
    }
}

/// The pipeline's other guidance arguments, with its defaults.
pub fn knobs() -> KnobSchema {
    let knob = |name: &str, kind, default: f64, doc: &str| Knob {
        name: name.into(),
        kind,
        default: KnobDefault::Value(fastvideo_request::number(default)),
        doc: doc.into(),
    };
    let scale = KnobKind::Number { min: 0.0, max: 100.0 };
    let unit = KnobKind::Number { min: 0.0, max: 1.0 };
    KnobSchema {
        knobs: vec![
            knob("audio_guidance_scale", KnobKind::GuidanceScale, 7.0, "the audio stream's classifier-free guidance"),
            knob("stg_scale", scale.clone(), 1.0, "spatio-temporal guidance of the video (0 is off)"),
            knob("audio_stg_scale", scale.clone(), 1.0, "spatio-temporal guidance of the audio (0 is off)"),
            knob("modality_scale", scale.clone(), 3.0, "modality guidance of the video (1 is off)"),
            knob("audio_modality_scale", scale, 3.0, "modality guidance of the audio (1 is off)"),
            knob("guidance_rescale", unit.clone(), 0.7, "rescale of the video's guided estimate (0 is off)"),
            knob("audio_guidance_rescale", unit, 0.7, "rescale of the audio's guided estimate (0 is off)"),
        ],
        // An adapter may bind to the two-stage recipe's `base` or `refine` loop.
        stage_adapters: true,
        ..Default::default()
    }
}

/// Bytes of the tensors under `prefix` of the checkpoint `stem` in `dir` once read as `kind`
/// (from the headers; nothing is read). 0 when there is none.
fn weight_bytes(dir: &Path, stem: &str, kind: Kind, prefix: &str) -> u64 {
    Weights::from_dir(dir, stem, Device::Cpu, kind).ok().and_then(|w| w.loaded_bytes_under(prefix)).unwrap_or(0)
}
