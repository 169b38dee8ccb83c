//! The LTX-2 pipeline as runtime nodes: prompt → both streams' text → the two-stream denoise
//! loop → video decode → frames → the video artifact, and audio decode → vocoder → the audio
//! artifact (two branches from the loop's outputs).

use std::sync::Arc;

use anyhow::Result;
use fastvideo_pipeline::{AssembleVideo, Node, NodeCtx, PipelineSpec, Stage, StreamGuidance, Value, Values, AUDIO};
use fastvideo_request::{AudioArtifact, TaskType};
use tch::{Kind, Tensor};

use crate::audio_vae::Ltx2AudioDecoder;
use crate::condition::Condition;
use crate::denoise::{Ltx2Denoise, Role};
use crate::keyframes::EncodeKeyframes;
use crate::latents::{denormalize_video, Statistics};
use crate::model::Ltx2Model;
use crate::prompt::PromptEncoder;
use crate::refine::{two_stage, Upsample, REFINE};
use crate::values::{
    AUDIO_LATENTS, AUDIO_TEXT, CONDITION, FRAMES, KEYFRAME_LATENTS, LATENTS, TEXT_MASK, UPSAMPLED, VIDEO, VIDEO_TEXT,
};
use crate::video_vae::Ltx2VideoDecoder;
use crate::vocoder::Ltx2Vocoder;

/// The prompt (and, with guidance, the negative prompt first) through Gemma 3 and the
/// connectors, as one batch.
struct EncodePrompt {
    prompts: Arc<PromptEncoder>,
    /// A stream guider is bound: it may ask for the negative prompt whatever the scales.
    guider: bool,
}

impl Stage for EncodePrompt {
    fn run(&self, ctx: &NodeCtx, values: &mut Values) -> Result<()> {
        let req = ctx.request;
        let prompt = values.opt_text(fastvideo_pipeline::EXTENDED_PROMPT).unwrap_or(&req.prompt).to_string();
        let rows = match crate::denoise::needs_negative(req, self.guider) {
            true => vec![req.negative_prompt.clone(), prompt],
            false => vec![prompt],
        };
        let text = self.prompts.encode(&rows, ctx.device)?;
        values.insert(VIDEO_TEXT, Value::Tensor(text.video));
        values.insert(AUDIO_TEXT, Value::Tensor(text.audio));
        values.insert(TEXT_MASK, Value::Tensor(text.mask));
        Ok(())
    }
}

/// The video latents back to the VAE's scale (in the transformer's dtype first, as the
/// pipeline casts them), then the decoder.
struct DecodeVideo {
    vae: Arc<Ltx2VideoDecoder>,
    stats: Arc<Statistics>,
    kind: Kind,
}

impl Stage for DecodeVideo {
    fn run(&self, _ctx: &NodeCtx, values: &mut Values) -> Result<()> {
        let z = values.tensor(LATENTS)?.to_kind(self.kind);
        let (mean, std, scale) = &self.stats.video;
        let z = denormalize_video(&z, &mean.to_device(z.device()), &std.to_device(z.device()), *scale);
        let frames = self.vae.decode(&z.to_kind(self.vae.kind()), None)?;
        values.insert(FRAMES, Value::Tensor(frames.to_kind(Kind::Float)));
        Ok(())
    }
}

/// The audio latents through the audio VAE's decoder and the vocoder: the `audio` artifact
/// (skipped when the request asks for no sound).
struct DecodeAudio {
    audio_vae: Arc<Ltx2AudioDecoder>,
    vocoder: Arc<Ltx2Vocoder>,
}

impl Stage for DecodeAudio {
    fn run(&self, ctx: &NodeCtx, values: &mut Values) -> Result<()> {
        if !ctx.request.generate_sound {
            return Ok(());
        }
        let z = values.tensor(AUDIO_LATENTS)?;
        let mel = self.audio_vae.decode(&z.to_kind(self.audio_vae.kind()))?;
        let wave = self.vocoder.forward(&mel).squeeze_dim(0).to_kind(Kind::Float);
        let channels = wave.size()[0] as u16;
        let samples = Vec::<f32>::try_from(wave.tr().contiguous().reshape([-1]).to_device(tch::Device::Cpu))?;
        let sample_rate = self.vocoder.sample_rate as u32;
        values.insert(AUDIO, Value::Audio(AudioArtifact { sample_rate, channels, samples }));
        Ok(())
    }
}

/// The latent statistics of a loaded folder, on its device.
pub fn statistics(model: &Ltx2Model) -> Statistics {
    let f = |t: &Tensor| t.to_kind(Kind::Float);
    Statistics {
        video: (f(&model.vae.latents_mean), f(&model.vae.latents_std), model.vae.cfg.scaling_factor),
        audio: (f(&model.audio_vae.latents_mean), f(&model.audio_vae.latents_std)),
    }
}

/// The spec of a loaded folder (text to video with sound), after `text_stages` (a prompt
/// rewrite: they write `EXTENDED_PROMPT`, which the prompt encoding reads in place of the
/// request's prompt), guided by `guidance` (a deploy's stream guider) or the pipeline's rule.
pub fn spec(
    model: &Ltx2Model,
    text_stages: Vec<Node>,
    guidance: Option<Arc<dyn StreamGuidance>>,
) -> Result<PipelineSpec> {
    let stats = Arc::new(statistics(model));
    let denoise = |role, guidance| Ltx2Denoise {
        model: Arc::clone(&model.transformer),
        schedule: Arc::clone(&model.schedule),
        geometry: model.geometry,
        stats: Arc::clone(&stats),
        guidance,
        role,
    };
    let texts = [VIDEO_TEXT, AUDIO_TEXT, TEXT_MASK];
    let mut nodes = text_stages;
    nodes.extend([
        Node::stage(
            "encode_prompt",
            Arc::new(EncodePrompt { prompts: Arc::clone(&model.prompts), guider: guidance.is_some() }),
            &[],
            &[VIDEO_TEXT, AUDIO_TEXT, TEXT_MASK],
        ),
        Node::stage(
            "condition",
            Arc::new(Condition { encoder: Arc::clone(&model.encoder), stats: Arc::clone(&stats) }),
            &[],
            &[CONDITION],
        )
        .for_tasks(&[TaskType::I2v])
        .when(|r| !crate::keyframes::has_keyframes(r)),
        Node::stage(
            "keyframes",
            Arc::new(EncodeKeyframes { encoder: Arc::clone(&model.encoder), stats: Arc::clone(&stats) }),
            &[],
            &[KEYFRAME_LATENTS],
        )
        .when(crate::keyframes::has_keyframes),
        Node::looped(
            crate::refine::DENOISE,
            Arc::new(denoise(Role::Base, guidance.clone())),
            &texts,
            &[LATENTS, AUDIO_LATENTS],
        )
        .with_params(crate::refine::base_schema())?,
    ]);
    // The two-stage recipe, for requests that give `node_params.refine`: upsample, then refine.
    if let Some(upsampler) = &model.upsampler {
        let upsample = Upsample { upsampler: Arc::clone(upsampler), stats: Arc::clone(&stats) };
        let refine_in = [VIDEO_TEXT, AUDIO_TEXT, TEXT_MASK, UPSAMPLED, AUDIO_LATENTS];
        nodes.extend([
            Node::stage("upsample", Arc::new(upsample), &[LATENTS], &[UPSAMPLED]).when(two_stage),
            Node::looped(REFINE, Arc::new(denoise(Role::Refine, None)), &refine_in, &[LATENTS, AUDIO_LATENTS])
                .when(two_stage)
                .with_params(crate::refine::schema())?,
        ]);
    }
    nodes.extend([
        Node::stage(
            "decode_video",
            Arc::new(DecodeVideo { vae: Arc::clone(&model.vae), stats, kind: model.transformer.kind() }),
            &[LATENTS],
            &[FRAMES],
        ),
        Node::stage("assemble", Arc::new(AssembleVideo { frames: FRAMES, video: VIDEO }), &[FRAMES], &[VIDEO]),
        Node::stage(
            "decode_audio",
            Arc::new(DecodeAudio { audio_vae: Arc::clone(&model.audio_vae), vocoder: Arc::clone(&model.vocoder) }),
            &[AUDIO_LATENTS],
            &[AUDIO],
        ),
    ]);
    let spec = PipelineSpec::new("ltx2", model.limits().tasks, nodes, &[], VIDEO)?;
    Ok(spec.with_adapters(Arc::new(fastvideo_layers::adapters::Adapted(model.transformer.clone()))))
}
