//! The FLUX.2 [klein] pipeline as runtime nodes: prompt embeddings → reference latents (edits)
//! → the denoise loop → VAE decode → the picture.

use std::sync::Arc;

use anyhow::Result;
use fastvideo_pipeline::{AssembleVideo, Node, NodeCtx, PipelineSpec, Stage, Value, Values};
use fastvideo_request::TaskType;
use tch::Tensor;

use crate::condition::References;
use crate::denoise::Flux2Denoise;
use crate::model::Flux2Model;
use crate::prompt::PromptEncoder;
use crate::vae::{unpatchify, Flux2Vae};
use crate::values::{FRAMES, LATENTS, NEGATIVE_EMBEDS, PROMPT_EMBEDS, REFERENCE_IDS, REFERENCE_TOKENS, VIDEO};

/// The prompt's embeddings, and the negative branch's when guidance runs (the request's
/// negative prompt; the empty prompt, as the pipeline, when it gives none).
struct EncodePrompt {
    encoder: Arc<PromptEncoder>,
    denoise: Arc<Flux2Denoise>,
}

impl Stage for EncodePrompt {
    fn run(&self, ctx: &NodeCtx, values: &mut Values) -> Result<()> {
        let req = ctx.request;
        let prompt = values.opt_text(fastvideo_pipeline::EXTENDED_PROMPT).unwrap_or(&req.prompt).to_string();
        let cfg = self.denoise.does_cfg(req);
        let mut prompts = vec![prompt.as_str()];
        if cfg {
            prompts.push(&req.negative_prompt);
        }
        let embeds = self.encoder.encode(&prompts)?;
        values.insert(PROMPT_EMBEDS, Value::Tensor(embeds.narrow(0, 0, 1)));
        if cfg {
            values.insert(NEGATIVE_EMBEDS, Value::Tensor(embeds.narrow(0, 1, 1)));
        }
        Ok(())
    }
}

/// The final latents denormalised (BatchNorm statistics), unpatchified and decoded.
struct VaeDecode {
    vae: Arc<Flux2Vae>,
}

impl Stage for VaeDecode {
    fn run(&self, _ctx: &NodeCtx, values: &mut Values) -> Result<()> {
        let z = unpatchify(&self.vae.denormalize(values.tensor(LATENTS)?));
        let pixels: Tensor = self.vae.decode(&z).to_kind(tch::Kind::Float);
        values.insert(FRAMES, Value::Tensor(pixels.unsqueeze(2)));
        Ok(())
    }
}

/// The spec of a loaded folder: text to image, and edits.
pub fn spec(model: &Flux2Model) -> Result<PipelineSpec> {
    spec_with(model, Vec::new())
}

/// [`spec`] after `text_stages` (a prompt rewrite writing `EXTENDED_PROMPT`).
pub fn spec_with(model: &Flux2Model, text_stages: Vec<Node>) -> Result<PipelineSpec> {
    let denoise = Arc::new(model.denoise());
    let mut nodes = text_stages;
    nodes.extend([
        Node::stage(
            "encode_prompt",
            Arc::new(EncodePrompt { encoder: Arc::clone(&model.prompt), denoise: Arc::clone(&denoise) }),
            &[],
            &[PROMPT_EMBEDS, NEGATIVE_EMBEDS],
        ),
        Node::stage(
            "reference_latents",
            Arc::new(References { vae: Arc::clone(&model.vae) }),
            &[],
            &[REFERENCE_TOKENS, REFERENCE_IDS],
        )
        .for_tasks(&[TaskType::I2i]),
        Node::looped("denoise", denoise, &[PROMPT_EMBEDS], &[LATENTS]),
        Node::stage("vae_decode", Arc::new(VaeDecode { vae: Arc::clone(&model.vae) }), &[LATENTS], &[FRAMES]),
        Node::stage("assemble", Arc::new(AssembleVideo { frames: FRAMES, video: VIDEO }), &[FRAMES], &[VIDEO]),
    ]);
    let spec = PipelineSpec::new("flux2-klein", model.tasks(), nodes, &[], VIDEO)?;
    Ok(spec.with_adapters(Arc::new(fastvideo_layers::adapters::Adapted(model.transformer.clone()))))
}
