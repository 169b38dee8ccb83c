//! A FLUX.2 [klein] folder loaded: `model_index.json` (`Flux2KleinPipeline`), `transformer/`,
//! `vae/`, `text_encoder/` (Qwen3), `tokenizer/`, `scheduler/`.

use std::path::Path;
use std::sync::Arc;

use anyhow::Result;
use fastvideo_layers::flow_match::FlowMatchConfig;
use fastvideo_request::{Defaults, ModelLimits, PictureLimits, SamplerKind, TaskType};
use tch::{Device, Kind};

use crate::config::PipelineConfig;
use crate::denoise::Flux2Denoise;
use crate::prompt::PromptEncoder;
use crate::transformer::Flux2Transformer;
use crate::vae::Flux2Vae;

/// Every component of a loaded folder.
pub struct Flux2Model {
    /// The transformer.
    pub transformer: Arc<Flux2Transformer>,
    /// The autoencoder.
    pub vae: Arc<Flux2Vae>,
    /// The Qwen3 prompt encoder.
    pub prompt: Arc<PromptEncoder>,
    /// The scheduler settings.
    pub scheduler: FlowMatchConfig,
    /// Pipeline settings.
    pub pipeline: PipelineConfig,
}

impl Flux2Model {
    /// Loads `dir` onto `device`: the transformer in `kind`, the text encoder in `text_kind`,
    /// the VAE in `vae_kind`.
    pub fn load(dir: &Path, device: Device, kind: Kind, text_kind: Kind, vae_kind: Kind) -> Result<Self> {
        let pipeline = PipelineConfig::load(&dir.join("model_index.json"))?;
        let scheduler = FlowMatchConfig::load(&dir.join("scheduler/scheduler_config.json"))?;
        let transformer = Arc::new(Flux2Transformer::load(&dir.join("transformer"), device, kind)?);
        let vae = Arc::new(Flux2Vae::load(&dir.join("vae"), device, vae_kind)?);
        let prompt =
            Arc::new(PromptEncoder::load(&dir.join("text_encoder"), &dir.join("tokenizer"), device, text_kind)?);
        anyhow::ensure!(
            prompt.width() == transformer.config().joint_attention_dim,
            "{}: the text encoder gives {} features a token; the transformer takes {}",
            dir.display(),
            prompt.width(),
            transformer.config().joint_attention_dim
        );
        let latent4 = 4 * vae.cfg.latent_channels;
        anyhow::ensure!(
            latent4 == transformer.config().in_channels,
            "{}: the VAE's patchified latents have {latent4} channels; the transformer takes {}",
            dir.display(),
            transformer.config().in_channels
        );
        Ok(Self { transformer, vae, prompt, scheduler, pipeline })
    }

    /// Pixels per token side: the VAE's scale × the 2×2 patch.
    pub fn pixels_per_token(&self) -> i64 {
        2 * self.vae.cfg.scale_factor()
    }

    /// The denoise loop of this model.
    pub fn denoise(&self) -> Flux2Denoise {
        Flux2Denoise {
            model: Arc::clone(&self.transformer),
            scheduler: self.scheduler.clone(),
            pixels_per_token: self.pixels_per_token(),
            distilled: self.pipeline.is_distilled,
        }
    }

    /// Text to image, and edits with reference pictures.
    pub fn tasks(&self) -> Vec<TaskType> {
        vec![TaskType::T2i, TaskType::I2i]
    }

    /// What requests it takes: pictures with sides multiples of the token size, up to 2048;
    /// the pipeline's defaults (1024², 50 steps, guidance 4; a distilled model 4 steps,
    /// guidance 1).
    pub fn limits(&self) -> ModelLimits {
        let (steps, guidance) = match self.pipeline.is_distilled {
            true => (4, 1.0),
            false => (50, 4.0),
        };
        ModelLimits {
            family: "FLUX.2".into(),
            tasks: self.tasks(),
            image_roles: vec![fastvideo_request::ImageRole::Reference],
            video: None,
            picture: Some(PictureLimits { spatial_multiple: self.pixels_per_token() as u32, max_side: 2048 }),
            audio: None,
            action: None,
            references: Some(crate::condition::REFERENCES),
            max_steps: 1000,
            defaults: Defaults {
                steps,
                guidance_scale: guidance,
                shift: self.scheduler.shift as f32,
                height: 1024,
                width: 1024,
                num_frames: 1,
                fps: 1,
                sampler: SamplerKind::Euler,
                negative_prompt: String::new(),
                timesteps: None,
                knobs: Default::default(),
            },
        }
    }
}
