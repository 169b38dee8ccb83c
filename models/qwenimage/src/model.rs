//! A Qwen-Image folder loaded: `model_index.json` (`QwenImagePipeline`), `transformer/`, `vae/`
//! (`AutoencoderKLQwenImage`, Wan 2.1's architecture), `text_encoder/` (Qwen2.5-VL),
//! `tokenizer/`, `scheduler/`.

use std::path::Path;
use std::sync::Arc;

use anyhow::{ensure, Context, Result};
use fastvideo_layers::flow_match::FlowMatchConfig;
use fastvideo_request::{Defaults, ModelLimits, PictureLimits, SamplerKind, TaskType};
use fastvideo_torch::weights::Weights;
use fastvideo_wan::{AutoencoderKLWan, VaeConfig};
use serde_json::Value;
use tch::{Device, Kind};

use crate::denoise::QwenImageDenoise;
use crate::edit::{EditEncoder, EditKind};
use crate::prompt::PromptEncoder;
use crate::transformer::QwenImageTransformer;

/// The Wan-architecture autoencoder of `dir` (`AutoencoderKLQwenImage`'s config).
pub fn load_vae(dir: &Path, device: Device, kind: Kind) -> Result<AutoencoderKLWan> {
    let cfg = VaeConfig::load(&dir.join("config.json"))?;
    let w = Weights::from_dir(dir, "diffusion_pytorch_model", device, kind)?;
    AutoencoderKLWan::new(cfg, &w)
}

/// Every component of a loaded folder.
pub struct QwenImageModel {
    /// The transformer.
    pub transformer: Arc<QwenImageTransformer>,
    /// The autoencoder.
    pub vae: Arc<AutoencoderKLWan>,
    /// The Qwen2.5-VL prompt encoder.
    pub prompt: Arc<PromptEncoder>,
    /// The scheduler settings.
    pub scheduler: FlowMatchConfig,
    /// An edit folder's vision path (`None`: text to image).
    pub edit: Option<Arc<EditEncoder>>,
    /// A single-file transformer's quantized formats (GGUF, FP8), for the load report.
    pub quantized_weights: Option<String>,
}

impl QwenImageModel {
    /// Loads `dir` onto `device`: the transformer in `kind` (its weights from `transformer` when
    /// given: one file as ComfyUI publishes it, safetensors or GGUF), the text encoder in
    /// `text_kind`, the VAE in `vae_kind`.
    pub fn load(dir: &Path, transformer: Option<&Path>, device: Device, kinds: (Kind, Kind, Kind)) -> Result<Self> {
        let (kind, text_kind, vae_kind) = kinds;
        let index = dir.join("model_index.json");
        let text = std::fs::read_to_string(&index).with_context(|| format!("reading {}", index.display()))?;
        let v: Value = serde_json::from_str(&text).with_context(|| format!("{}: not valid JSON", index.display()))?;
        let class = v.get("_class_name").and_then(Value::as_str).unwrap_or("");
        let edit_kind = match class {
            "QwenImagePipeline" => None,
            "QwenImageEditPipeline" => Some(EditKind::Edit),
            "QwenImageEditPlusPipeline" => Some(EditKind::EditPlus),
            other => anyhow::bail!(
                "{}: `_class_name` {other:?} is not QwenImagePipeline, QwenImageEditPipeline or QwenImageEditPlusPipeline",
                index.display()
            ),
        };
        let scheduler = FlowMatchConfig::load(&dir.join("scheduler/scheduler_config.json"))?;
        let (transformer, quantized_weights) =
            QwenImageTransformer::load(&dir.join("transformer"), transformer, device, kind)?;
        let transformer = Arc::new(transformer);
        let vae = Arc::new(load_vae(&dir.join("vae"), device, vae_kind)?);
        let prompt =
            Arc::new(PromptEncoder::load(&dir.join("text_encoder"), &dir.join("tokenizer"), device, text_kind)?);
        let c = transformer.config();
        ensure!(
            prompt.width() == c.joint_attention_dim,
            "{}: the text encoder gives {} features a token; the transformer takes {}",
            dir.display(),
            prompt.width(),
            c.joint_attention_dim
        );
        ensure!(
            4 * vae.cfg.z_dim == c.in_channels,
            "{}: the VAE's packed latents have {} channels; the transformer takes {}",
            dir.display(),
            4 * vae.cfg.z_dim,
            c.in_channels
        );
        let edit = match edit_kind {
            Some(kind) => Some(Arc::new(EditEncoder::load(
                kind,
                &dir.join("text_encoder"),
                &dir.join("processor"),
                device,
                text_kind,
            )?)),
            None => None,
        };
        Ok(Self { transformer, vae, prompt, scheduler, edit, quantized_weights })
    }

    /// Another handle to the same components (nothing copied).
    pub fn share(&self) -> Self {
        Self {
            transformer: Arc::clone(&self.transformer),
            vae: Arc::clone(&self.vae),
            prompt: Arc::clone(&self.prompt),
            scheduler: self.scheduler.clone(),
            edit: self.edit.clone(),
            quantized_weights: self.quantized_weights.clone(),
        }
    }

    /// Pixels per token side: the VAE's spatial factor × the 2×2 patch.
    pub fn pixels_per_token(&self) -> i64 {
        2 * self.vae.cfg.spatial_factor()
    }

    /// The denoise loop of this model.
    pub fn denoise(&self) -> QwenImageDenoise {
        QwenImageDenoise {
            model: Arc::clone(&self.transformer),
            scheduler: self.scheduler.clone(),
            pixels_per_token: self.pixels_per_token(),
        }
    }

    /// Text to image; an edit folder edits (`i2i`) only, as its pipeline.
    pub fn tasks(&self) -> Vec<TaskType> {
        match self.edit {
            Some(_) => vec![TaskType::I2i],
            None => vec![TaskType::T2i],
        }
    }

    /// An edit folder's reference rules: Edit one picture, Edit-Plus several, each scaled to
    /// about a megapixel for the VAE (the output's default size).
    pub fn references(&self) -> Option<fastvideo_request::ReferenceLimits> {
        let edit = self.edit.as_ref()?;
        Some(fastvideo_request::ReferenceLimits {
            max_references: if edit.kind == EditKind::EditPlus { 4 } else { 1 },
            min_reference_side: 28,
            max_reference_aspect: 200.0,
            max_reference_area: crate::edit::VAE_AREA as u64,
            scale_to_area: true,
        })
    }

    /// What requests it takes: sides multiples of the token size up to 2048; the pipeline's
    /// defaults (1024², 50 steps, `true_cfg_scale` 4, guidance only with a negative prompt).
    pub fn limits(&self) -> ModelLimits {
        ModelLimits {
            family: "Qwen-Image".into(),
            tasks: self.tasks(),
            image_roles: if self.edit.is_some() { vec![fastvideo_request::ImageRole::Reference] } else { Vec::new() },
            video: None,
            picture: Some(PictureLimits { spatial_multiple: self.pixels_per_token() as u32, max_side: 2048 }),
            audio: None,
            action: None,
            references: self.references(),
            max_steps: 1000,
            defaults: Defaults {
                steps: 50,
                guidance_scale: 4.0,
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
