//! The Cosmos3 pipeline as runtime nodes: prompt ids → the omni denoise loop → VAE decode →
//! frames, and sound decode → the audio artifact when the request makes sound.

use std::sync::Arc;

use anyhow::Result;
use fastvideo_pipeline::{AssembleVideo, Node, NodeCtx, PipelineSpec, Stage, Value, Values, ACTIONS, AUDIO};
use fastvideo_request::{AudioArtifact, TaskType};
use fastvideo_wan::AutoencoderKLWan;
use tch::{Kind, Tensor};

use crate::condition::VisionCondition;
use crate::denoise::OmniDenoise;
use crate::model::Cosmos3Model;
use crate::prompt::{PromptBuilder, Shape};
use crate::sound::SoundTokenizer;
use crate::values::{
    ACTION_CLEAN, ACTION_CONDITION, ACTION_LATENTS, CLEAN_FRAMES, CONDITION_LATENTS, FRAMES, LATENTS, NEGATIVE_IDS,
    PROMPT_IDS, SOUND_LATENTS, VIDEO,
};

/// Tokenizes the prompt and negative prompt with the pipeline's templates.
struct PromptIds {
    prompts: Arc<PromptBuilder>,
}

impl Stage for PromptIds {
    fn run(&self, ctx: &NodeCtx, values: &mut Values) -> Result<()> {
        let req = ctx.request;
        let prompt = values.opt_text(fastvideo_pipeline::EXTENDED_PROMPT).unwrap_or(&req.prompt).to_string();
        let shape = Shape { frames: req.num_frames, height: req.height, width: req.width, fps: req.fps as f64 };
        let (cond, uncond) = match &req.action {
            // The action model reads a JSON caption; the negative prompt goes as it is.
            Some(a) => {
                let text = crate::action::caption(
                    &prompt,
                    &a.view_point,
                    req.num_frames,
                    req.fps as f64,
                    req.height,
                    req.width,
                );
                (self.prompts.ids(&text, false)?, self.prompts.ids(&req.negative_prompt, false)?)
            }
            None => self.prompts.branches(&prompt, &req.negative_prompt, shape)?,
        };
        values.insert(PROMPT_IDS, Value::Tensor(Tensor::from_slice(&cond)));
        if crate::denoise::does_cfg(req) {
            values.insert(NEGATIVE_IDS, Value::Tensor(Tensor::from_slice(&uncond)));
        }
        Ok(())
    }
}

/// `z / (1/std) + mean` (the reciprocal first, as the reference computes it), then the VAE.
struct VaeDecode {
    vae: Arc<AutoencoderKLWan>,
}

impl VaeDecode {
    fn denormalize(&self, z: &Tensor) -> Tensor {
        let c = &self.vae.cfg;
        let n = c.z_dim;
        let opts = (Kind::Float, z.device());
        let stat = |v: &[f64]| Tensor::from_slice(&v.iter().map(|x| *x as f32).collect::<Vec<_>>()).to_device(opts.1);
        let inv_std = stat(&c.latents_std).reciprocal().view([1, n, 1, 1, 1]);
        let mean = stat(&c.latents_mean).view([1, n, 1, 1, 1]);
        z.to_kind(Kind::Float) / inv_std + mean
    }
}

impl Stage for VaeDecode {
    fn run(&self, _ctx: &NodeCtx, values: &mut Values) -> Result<()> {
        let z = self.denormalize(values.tensor(LATENTS)?);
        let frames = self.vae.decode(&z)?;
        values.insert(FRAMES, Value::Tensor(frames));
        Ok(())
    }
}

/// The sound latents through the sound tokenizer's decoder: the `audio` artifact (not trimmed
/// to the video's length, as the reference returns it; the MP4 muxer trims).
struct SoundDecode {
    tokenizer: Arc<SoundTokenizer>,
}

impl Stage for SoundDecode {
    fn run(&self, _ctx: &NodeCtx, values: &mut Values) -> Result<()> {
        let Some(latent) = values.opt_tensor(SOUND_LATENTS) else { return Ok(()) };
        let wave = self.tokenizer.decode(&latent.unsqueeze(0))?.squeeze_dim(0).to_kind(Kind::Float);
        let channels = wave.size()[0] as u16;
        let samples = Vec::<f32>::try_from(wave.tr().contiguous().reshape([-1]).to_device(tch::Device::Cpu))?;
        values.insert(
            AUDIO,
            Value::Audio(AudioArtifact { sample_rate: self.tokenizer.sample_rate() as u32, channels, samples }),
        );
        Ok(())
    }
}

/// The spec of a loaded folder: text, picture and video to video, text to image, the action
/// tasks (sound when asked).
pub fn spec(model: &Cosmos3Model) -> Result<PipelineSpec> {
    spec_with(model, Vec::new())
}

/// [`spec`] after `text_stages` (a prompt rewrite: they write `EXTENDED_PROMPT`, which the
/// prompt's tokenization reads in place of the request's prompt).
pub fn spec_with(model: &Cosmos3Model, text_stages: Vec<Node>) -> Result<PipelineSpec> {
    let denoise = OmniDenoise {
        model: Arc::clone(&model.transformer),
        schedule: model.schedule.clone(),
        geometry: model.geometry(),
    };
    let action_dim = model.transformer.config().action().unwrap_or(0);
    let mut conditioned = vec![TaskType::I2v, TaskType::V2v];
    if action_dim > 0 {
        conditioned.extend([TaskType::Policy, TaskType::ForwardDynamics, TaskType::InverseDynamics]);
    }
    let mut nodes = text_stages;
    nodes.extend([
        Node::stage(
            "prompt_ids",
            Arc::new(PromptIds { prompts: Arc::clone(&model.prompts) }),
            &[],
            &[PROMPT_IDS, NEGATIVE_IDS],
        ),
        Node::stage(
            "vision_condition",
            Arc::new(VisionCondition { vae: Arc::clone(&model.vae), action_dim }),
            &[],
            &[CONDITION_LATENTS, CLEAN_FRAMES, ACTION_CONDITION, ACTION_CLEAN],
        )
        .for_tasks(&conditioned),
        Node::looped("denoise", Arc::new(denoise), &[PROMPT_IDS], &[LATENTS, SOUND_LATENTS, ACTION_LATENTS]),
        Node::stage("vae_decode", Arc::new(VaeDecode { vae: Arc::clone(&model.vae) }), &[LATENTS], &[FRAMES]),
        Node::stage("assemble", Arc::new(AssembleVideo { frames: FRAMES, video: VIDEO }), &[FRAMES], &[VIDEO]),
    ]);
    if let Some(tokenizer) = &model.sound {
        nodes.push(Node::stage(
            "sound_decode",
            Arc::new(SoundDecode { tokenizer: Arc::clone(tokenizer) }),
            &[LATENTS],
            &[AUDIO],
        ));
    }
    if action_dim > 0 {
        nodes.push(
            Node::stage("action_out", Arc::new(ActionOut), &[ACTION_LATENTS], &[ACTIONS])
                .for_tasks(&[TaskType::Policy, TaskType::InverseDynamics]),
        );
    }
    Ok(PipelineSpec::new("cosmos3-omni", model.tasks(), nodes, &[], VIDEO)?)
}

/// The predicted actions (policy, inverse dynamics): the first `width` columns of the final
/// action latents, as the `action` artifact.
struct ActionOut;

impl Stage for ActionOut {
    fn run(&self, ctx: &NodeCtx, values: &mut Values) -> Result<()> {
        let Some(a) = &ctx.request.action else { return Ok(()) };
        let latents = values.tensor(ACTION_LATENTS)?;
        let out = latents.narrow(1, 0, a.width as i64).contiguous();
        values.insert(ACTIONS, Value::Tensor(out));
        Ok(())
    }
}
