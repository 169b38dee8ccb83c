//! A Cosmos3 folder loaded: `model_index.json` (`Cosmos3OmniPipeline`), `transformer/`,
//! `vae/` (Wan 2.2's), `text_tokenizer/`, `scheduler/`, and `sound_tokenizer/` when present.

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, ensure, Context, Result};
use fastvideo_request::{
    AudioLimits, Defaults, ImageRole, ModelLimits, PictureLimits, SamplerKind, TaskType, VideoLimits,
};
use fastvideo_torch::weights::Weights;
use fastvideo_wan::{AutoencoderKLWan, VaeConfig};
use serde_json::Value;
use tch::{Device, Kind};

use crate::denoise::{Geometry, Schedule};
use crate::prompt::PromptBuilder;
use crate::transformer::Cosmos3Transformer;

/// `model_index.json`'s pipeline settings.
#[derive(Clone, Debug)]
pub struct PipelineConfig {
    /// Prompts get the system message by default.
    pub default_use_system_prompt: bool,
    /// The schedule's base sigmas are `linspace(1 - 1/1000, 0, N + 1)[:-1]`.
    pub use_native_flow_schedule: bool,
}

impl PipelineConfig {
    /// Reads `model_index.json`; a folder of another pipeline is refused naming its class.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let v: Value = serde_json::from_str(&text).with_context(|| format!("{}: not valid JSON", path.display()))?;
        let class = v.get("_class_name").and_then(Value::as_str).unwrap_or("");
        ensure!(
            class == "Cosmos3OmniPipeline",
            "{}: `_class_name` {class:?} is not Cosmos3OmniPipeline",
            path.display()
        );
        let flag = |key: &str, default: bool| -> Result<bool> {
            match v.get(key) {
                None | Some(Value::Null) => Ok(default),
                Some(Value::Bool(b)) => Ok(*b),
                Some(other) => bail!("{}: `{key}` = {other} must be true or false", path.display()),
            }
        };
        Ok(Self {
            default_use_system_prompt: flag("default_use_system_prompt", true)?,
            use_native_flow_schedule: flag("use_native_flow_schedule", false)?,
        })
    }
}

/// Every component of a loaded folder.
pub struct Cosmos3Model {
    /// The mixture-of-transformers.
    pub transformer: Arc<Cosmos3Transformer>,
    /// Wan 2.2's video VAE.
    pub vae: Arc<AutoencoderKLWan>,
    /// Prompt templates and tokenizer.
    pub prompts: Arc<PromptBuilder>,
    /// The solver settings.
    pub schedule: Schedule,
    /// Pipeline settings.
    pub pipeline: PipelineConfig,
    /// The sound tokenizer, when the folder has one.
    pub sound: Option<Arc<crate::sound::SoundTokenizer>>,
}

impl Cosmos3Model {
    /// Loads `dir` onto `device`, the transformer in `kind` (the VAE and sound tokenizer in
    /// `vae_kind`).
    pub fn load(dir: &Path, device: Device, kind: Kind, vae_kind: Kind) -> Result<Self> {
        let pipeline = PipelineConfig::load(&dir.join("model_index.json"))?;
        let transformer = Arc::new(Cosmos3Transformer::load(&dir.join("transformer"), device, kind)?);
        let v_dir = dir.join("vae");
        let vae_cfg = VaeConfig::load(&v_dir.join("config.json"))?;
        let vae_w = Weights::from_dir(&v_dir, "diffusion_pytorch_model", device, vae_kind)?;
        let vae = Arc::new(AutoencoderKLWan::new(vae_cfg, &vae_w)?);
        let sched = fastvideo_wan::scheduler::load(&dir.join("scheduler/scheduler_config.json"))?;
        ensure!(
            sched.sampler == SamplerKind::Unipc,
            "{}: Cosmos3 runs UniPCMultistepScheduler",
            dir.join("scheduler/scheduler_config.json").display()
        );
        let schedule = Schedule {
            unipc: fastvideo_pipeline::sampler::UniPcConfig { flow_shift: sched.shift, ..Default::default() },
            native: pipeline.use_native_flow_schedule,
        };
        let prompts = Arc::new(PromptBuilder::load(&dir.join("text_tokenizer"), pipeline.default_use_system_prompt)?);
        let s_dir = dir.join("sound_tokenizer");
        let sound = match s_dir.join("config.json").is_file() {
            true => Some(Arc::new(crate::sound::SoundTokenizer::load(&s_dir, device, vae_kind)?)),
            false => None,
        };
        if transformer.config().sound_gen && sound.is_none() {
            bail!("{}: the transformer makes sound but the folder has no sound_tokenizer/", dir.display());
        }
        Ok(Self { transformer, vae, prompts, schedule, pipeline, sound })
    }

    /// What requests this model takes: text to video and image; frames `4k + 1`; sides multiples
    /// of 16; the pipeline's defaults (720×1280, 189 frames at 24 fps, 35 steps, guidance 6).
    pub fn limits(&self) -> ModelLimits {
        let tf = self.vae.cfg.temporal_factor() as u32;
        let spatial = self.vae.cfg.spatial_factor() as u32;
        ModelLimits {
            family: "Cosmos3".into(),
            tasks: self.tasks(),
            image_roles: vec![ImageRole::FirstFrame],
            video: Some(VideoLimits { frame_multiple: tf, max_frames: 1 + tf * 96 }),
            picture: Some(PictureLimits { spatial_multiple: spatial, max_side: 2048 }),
            audio: self.geometry().sound.map(|(sample_rate, _)| AudioLimits {
                sample_rate,
                channels: self.sound.as_ref().map_or(2, |s| s.channels() as u16),
            }),
            action: self.transformer.config().action().map(|dim| crate::action::limits(dim as u32, spatial, tf)),
            references: None,
            max_steps: 1000,
            defaults: Defaults {
                steps: 35,
                guidance_scale: 6.0,
                shift: self.schedule.unipc.flow_shift as f32,
                height: 720,
                width: 1280,
                num_frames: 189,
                fps: 24,
                sampler: SamplerKind::Unipc,
                negative_prompt: String::new(),
                timesteps: None,
                knobs: Default::default(),
            },
        }
    }

    /// The tasks it runs: text, picture and video to video; the action tasks when it has action
    /// heads.
    pub fn tasks(&self) -> Vec<TaskType> {
        let mut tasks = vec![TaskType::T2v, TaskType::T2i, TaskType::I2v, TaskType::V2v];
        if self.transformer.config().action_gen {
            tasks.extend([TaskType::Policy, TaskType::ForwardDynamics, TaskType::InverseDynamics]);
        }
        tasks
    }

    /// Latent geometry for the loop.
    pub fn geometry(&self) -> Geometry {
        let c = &self.vae.cfg;
        Geometry {
            z_dim: c.z_dim,
            temporal: c.temporal_factor(),
            spatial: c.spatial_factor(),
            sound: self
                .sound
                .as_ref()
                .filter(|_| self.transformer.config().sound_gen)
                .map(|s| (s.sample_rate() as u32, s.hop())),
        }
    }
}
