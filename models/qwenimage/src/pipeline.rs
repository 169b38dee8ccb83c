//! The Qwen-Image pipeline as runtime nodes: prompt embeddings → the denoise loop → VAE decode →
//! the picture.

use std::sync::Arc;

use anyhow::Result;
use fastvideo_pipeline::{AssembleVideo, Node, NodeCtx, PipelineSpec, Stage, Value, Values};
use fastvideo_request::{ImageRole, InputImage, TaskType};
use fastvideo_wan::AutoencoderKLWan;
use tch::{Kind, Tensor};

use crate::denoise::QwenImageDenoise;
use crate::edit::EditEncoder;
use crate::model::QwenImageModel;
use crate::prompt::PromptEncoder;
use crate::values::{FRAMES, LATENTS, NEGATIVE_EMBEDS, PROMPT_EMBEDS, REFERENCE_GRIDS, REFERENCE_TOKENS, VIDEO};

/// The prompt's embeddings, and the negative prompt's when guidance runs; an edit's with its
/// pictures.
struct EncodePrompt {
    encoder: Arc<PromptEncoder>,
    edit: Option<Arc<EditEncoder>>,
    denoise: Arc<QwenImageDenoise>,
}

impl Stage for EncodePrompt {
    fn run(&self, ctx: &NodeCtx, values: &mut Values) -> Result<()> {
        let req = ctx.request;
        let prompt = values.opt_text(fastvideo_pipeline::EXTENDED_PROMPT).unwrap_or(&req.prompt).to_string();
        let pictures: Vec<&InputImage> = req.images.iter().filter(|i| i.role == ImageRole::Reference).collect();
        // The pictures through the vision tower once, for both prompts.
        let tokens = self.edit.as_ref().map(|edit| (edit, edit.pictures(&pictures, ctx.device)));
        let encode = |text: &str| -> Result<Tensor> {
            // The text-to-image pipeline cuts the prompt to 512 tokens; the edit pipelines do not.
            match &tokens {
                Some((edit, tokens)) => self.encoder.encode_edit(edit, text, tokens),
                None => Ok(crate::prompt::cut(self.encoder.encode(text)?)),
            }
        };
        values.insert(PROMPT_EMBEDS, Value::Tensor(encode(&prompt)?));
        if self.denoise.does_cfg(req) {
            values.insert(NEGATIVE_EMBEDS, Value::Tensor(encode(&req.negative_prompt)?));
        }
        Ok(())
    }
}

/// An edit's pictures as packed reference latents and their grids.
struct References {
    vae: Arc<AutoencoderKLWan>,
}

impl Stage for References {
    fn run(&self, ctx: &NodeCtx, values: &mut Values) -> Result<()> {
        let (mut tokens, mut grids) = (Vec::new(), Vec::new());
        for im in ctx.request.images.iter().filter(|i| i.role == ImageRole::Reference) {
            let (t, (h, w)) = crate::edit::reference_latents(&self.vae, im, ctx.device)?;
            tokens.push(t);
            grids.extend([h, w]);
        }
        if !tokens.is_empty() {
            values.insert(REFERENCE_TOKENS, Value::Tensor(Tensor::cat(&tokens, 0)));
            values.insert(REFERENCE_GRIDS, Value::Tensor(Tensor::from_slice(&grids).view([-1, 2])));
        }
        Ok(())
    }
}

/// Packed latents unpacked to `[1, z, 1, h, w]`, denormalised (`z / (1/std) + mean`, as the
/// pipeline) and decoded; the first frame.
struct VaeDecode {
    vae: Arc<AutoencoderKLWan>,
    pixels_per_token: i64,
}

impl Stage for VaeDecode {
    fn run(&self, ctx: &NodeCtx, values: &mut Values) -> Result<()> {
        let req = ctx.request;
        let p = self.pixels_per_token;
        let (h, w) = (req.height as i64 / p, req.width as i64 / p);
        let tokens = values.tensor(LATENTS)?.to_kind(Kind::Float);
        let z = crate::latents::unpack(&tokens, h, w);
        let c = &self.vae.cfg;
        let n = c.z_dim;
        let stat =
            |v: &[f64]| Tensor::from_slice(&v.iter().map(|x| *x as f32).collect::<Vec<_>>()).to_device(z.device());
        let inv_std = stat(&c.latents_std).reciprocal().view([1, n, 1, 1, 1]);
        let mean = stat(&c.latents_mean).view([1, n, 1, 1, 1]);
        let frames = self.vae.decode(&(z / inv_std + mean))?.to_kind(Kind::Float);
        values.insert(FRAMES, Value::Tensor(frames.narrow(2, 0, 1)));
        Ok(())
    }
}

/// The spec of a loaded folder: text to image, or edits.
pub fn spec(model: &QwenImageModel) -> Result<PipelineSpec> {
    spec_with(model, Vec::new())
}

/// [`spec`] after `text_stages` (a prompt rewrite writing `EXTENDED_PROMPT`).
pub fn spec_with(model: &QwenImageModel, text_stages: Vec<Node>) -> Result<PipelineSpec> {
    let denoise = Arc::new(model.denoise());
    let mut nodes = text_stages;
    nodes.extend([
        Node::stage(
            "encode_prompt",
            Arc::new(EncodePrompt {
                encoder: Arc::clone(&model.prompt),
                edit: model.edit.clone(),
                denoise: Arc::clone(&denoise),
            }),
            &[],
            &[PROMPT_EMBEDS, NEGATIVE_EMBEDS],
        ),
        Node::stage(
            "reference_latents",
            Arc::new(References { vae: Arc::clone(&model.vae) }),
            &[],
            &[REFERENCE_TOKENS, REFERENCE_GRIDS],
        )
        .for_tasks(&[TaskType::I2i]),
        Node::looped("denoise", denoise, &[PROMPT_EMBEDS], &[LATENTS]),
        Node::stage(
            "vae_decode",
            Arc::new(VaeDecode { vae: Arc::clone(&model.vae), pixels_per_token: model.pixels_per_token() }),
            &[LATENTS],
            &[FRAMES],
        ),
        Node::stage("assemble", Arc::new(AssembleVideo { frames: FRAMES, video: VIDEO }), &[FRAMES], &[VIDEO]),
    ]);
    let spec = PipelineSpec::new("qwen-image", model.tasks(), nodes, &[], VIDEO)?;
    Ok(spec.with_adapters(Arc::new(fastvideo_layers::adapters::Adapted(model.transformer.clone()))))
}
