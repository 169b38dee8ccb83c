//! The Wan 2.1 pipelines as declarative graphs: text-to-video
//! `text_encode → denoise (loop) → vae_decode → assemble`, and for image-conditioned models
//! (I2V, FLF2V) `text_encode → image_encode → denoise → vae_decode → assemble`. Video to video
//! runs on the text-to-video graph, whose `video_encode` stage encodes the input video.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::{ensure, Result};
use fastvideo_pipeline::AssembleVideo;
use fastvideo_pipeline::{
    AdapterRows, AdapterSet, BlockHook, ClassicCfg, Conditioning, DenoiseLoop, Denoiser, EmbeddingCache, Guidance,
    LoopPolicies, Node, NodeCtx, OrModelRule, PipelineSpec, Stage, Value, Values,
};
use fastvideo_request::{ResolvedRequest, TaskType};
use tch::{Device, Tensor};

use fastvideo_layers::tokenizer::TextTokenizer;

use crate::image_encode::{FirstFrameEncode, ImageEncode};
use crate::loader::WanModel;
use crate::parallel::ParallelTransformer;
use crate::transformer::WanTransformer3DModel;
use crate::umt5::Umt5Encoder;
use crate::vae::AutoencoderKLWan;
use crate::video_encode::VideoEncode;

pub use crate::values;
use values::*;

struct TextEncode {
    tokenizer: TextTokenizer,
    encoder: Arc<Umt5Encoder>,
    default_len: usize,
    cache: Arc<EmbeddingCache>,
}

impl TextEncode {
    /// Encodes, then zeroes positions past each prompt's length (the reference trims and
    /// re-pads with zeros).
    fn embed(&self, text: &str, max_len: usize, device: Device, adapters: Option<&AdapterSet>) -> Result<Tensor> {
        let rows = AdapterRows::text(adapters);
        match &rows {
            // Embeddings made with text-encoder adapters are cached under the set as well.
            Some(r) => {
                let key = format!("{text}\u{0}lora:{}", r.groups[0].0.text_key());
                self.cache.get_or_encode(max_len, &key, || {
                    encode(&self.tokenizer, &self.encoder, text, max_len, device, Some(r))
                })
            }
            None => embed_with(&self.tokenizer, &self.encoder, &self.cache, text, max_len, device),
        }
    }
}

/// The masked encoder output for `text`, through the text-encoder adapters `lora` if any.
fn encode(
    tokenizer: &TextTokenizer,
    encoder: &Umt5Encoder,
    text: &str,
    max_len: usize,
    device: Device,
    lora: fastvideo_layers::Lora,
) -> Result<Tensor> {
    let (ids, mask) = tokenizer.encode(&[text.to_string()], max_len, device)?;
    let h = encoder.forward_lora(&ids, &mask, lora)?;
    Ok(&h * mask.unsqueeze(-1).to_kind(h.kind()))
}

fn embed_with(
    tokenizer: &TextTokenizer,
    encoder: &Umt5Encoder,
    cache: &EmbeddingCache,
    text: &str,
    max_len: usize,
    device: Device,
) -> Result<Tensor> {
    cache.get_or_encode(max_len, text, || encode(tokenizer, encoder, text, max_len, device, None))
}

/// The prompt embedding `[1, L, text_dim]` a pipeline's text-encode stage would make (through the
/// model's embedding cache), for loops that run outside a pipeline (world-model sessions).
pub fn embed_prompt(model: &WanModel, text: &str, device: Device) -> Result<Tensor> {
    embed_with(&model.tokenizer, &model.text_encoder, &model.text_cache, text, model.max_sequence_length(), device)
}

impl Stage for TextEncode {
    fn run(&self, ctx: &NodeCtx, values: &mut Values) -> Result<()> {
        let req = ctx.request;
        let max_len = node_param_usize(req, ctx.node, "max_sequence_length")?.unwrap_or(self.default_len);
        let adapters = values.adapters(fastvideo_pipeline::ADAPTERS).cloned();
        let adapters = adapters.as_deref();
        // The prompt extension, when the request ran it, wrote the prompt to encode.
        let prompt = values.opt_text(fastvideo_pipeline::EXTENDED_PROMPT).unwrap_or(&req.prompt);
        let embeds = self.embed(prompt, max_len, ctx.device, adapters)?;
        values.insert(PROMPT_EMBEDS, Value::Tensor(embeds));
        if req.does_cfg() {
            let negative = self.embed(&req.negative_prompt, max_len, ctx.device, adapters)?;
            values.insert(NEGATIVE_EMBEDS, Value::Tensor(negative));
        }
        Ok(())
    }
}

fn node_param_usize(req: &ResolvedRequest, node: &str, key: &str) -> Result<Option<usize>> {
    let Some(v) = req.node_params.get(node).and_then(|p| p.get(key)) else {
        return Ok(None);
    };
    let n = v.as_u64().filter(|n| (1..=4096).contains(n));
    ensure!(n.is_some(), "node_params.{node}.{key}: {v} must be an integer in 1..=4096");
    Ok(n.map(|n| n as usize))
}

/// The scheduler's training timesteps (the configs we accept pin it: scheduler.rs).
const NUM_TRAIN_TIMESTEPS: f32 = 1000.0;

/// The transformer (or a two-expert model's two) as the loop's denoiser.
struct WanDenoiser {
    /// Expert 0 is `transformer` (Wan 2.2's high-noise expert), expert 1 `transformer_2`.
    experts: Vec<Arc<WanTransformer3DModel>>,
    /// `--offload-experts`: the one on the device.
    offload: Option<Arc<crate::offload::ExpertSwap>>,
    /// The same transformer over several ranks, when the model runs parallel.
    parallel: Option<Arc<ParallelTransformer>>,
    z_dim: i64,
    temporal: i64,
    spatial: i64,
}

impl WanDenoiser {
    /// The expert `cond` asks for, brought to the device first when experts are offloaded.
    fn expert(&self, cond: &Conditioning) -> Result<&WanTransformer3DModel> {
        let Some(t) = self.experts.get(cond.expert as usize) else {
            anyhow::bail!("expert {} asked of a model with {}", cond.expert, self.experts.len())
        };
        if let Some(swap) = &self.offload {
            swap.ensure(cond.expert)?;
        }
        Ok(t)
    }
}

impl Denoiser for WanDenoiser {
    fn forward(&self, latents: &Tensor, timestep: &Tensor, cond: Conditioning) -> Result<Tensor> {
        match &self.parallel {
            Some(_) if cond.adapters.is_some() => {
                anyhow::bail!("LoRA adapters need the transformer on one device; this one runs parallel")
            }
            Some(p) => p.forward(latents, timestep, cond.text, cond.image),
            None => {
                let rows = cond.adapters.map(|r| r.for_expert(cond.expert));
                let rows = rows.as_ref().filter(|r| !r.is_empty());
                self.expert(&cond)?.forward_adapted(latents, timestep, cond.text, cond.image, rows, None)
            }
        }
    }
    fn forward_hooked(
        &self,
        latents: &Tensor,
        timestep: &Tensor,
        cond: Conditioning,
        hook: &mut dyn BlockHook,
    ) -> Result<Tensor> {
        ensure!(self.parallel.is_none(), "a block policy cannot run on a parallel transformer");
        let rows = cond.adapters.map(|r| r.for_expert(cond.expert));
        let rows = rows.as_ref().filter(|r| !r.is_empty());
        self.expert(&cond)?.forward_adapted(latents, timestep, cond.text, cond.image, rows, Some(hook))
    }
    fn experts(&self) -> u32 {
        self.experts.len() as u32
    }
    fn splits_batch(&self) -> bool {
        self.parallel.as_ref().is_some_and(|p| p.plan().cfg > 1)
    }
    fn latent_shape(&self, req: &ResolvedRequest) -> Vec<i64> {
        let f = (req.num_frames as i64 - 1) / self.temporal + 1;
        vec![1, self.z_dim, f, req.height as i64 / self.spatial, req.width as i64 / self.spatial]
    }
}

struct VaeDecode {
    vae: Arc<AutoencoderKLWan>,
}

impl Stage for VaeDecode {
    fn run(&self, _ctx: &NodeCtx, values: &mut Values) -> Result<()> {
        let latents = values.tensor(LATENTS)?;
        let frames = self.vae.decode(&self.vae.denormalize(latents))?;
        values.insert(FRAMES, Value::Tensor(frames));
        Ok(())
    }
}

/// Builds the validated pipeline for a loaded model, with `guidance` bound as its CFG policy.
pub fn text_to_video(model: &WanModel, guidance: Arc<dyn Guidance>) -> Result<PipelineSpec> {
    text_to_video_with(model, LoopPolicies::new(guidance))
}

/// [`text_to_video`] with every policy a deploy binds: guidance, an optional block cache and
/// step interceptor in the denoise loop, and observers watching each request.
pub fn text_to_video_with(model: &WanModel, policies: LoopPolicies) -> Result<PipelineSpec> {
    let LoopPolicies { guidance, stream_guidance, blocks, steps, observers, rewards, routing, text_stages } = policies;
    anyhow::ensure!(
        stream_guidance.is_none(),
        "a stream guider combines the streams of a model that denoises several (LTX-2's video and audio); Wan \
         denoises one: bind a guider instead"
    );
    if let (Some(p), Some(_)) = (&model.parallel, &blocks) {
        anyhow::bail!(
            "a block policy (block cache) needs the whole block loop on one device; it cannot run with --gpus {} \
             (deploy without it, or run on one GPU)",
            p.plan().ranks()
        );
    }
    // A two-expert model routes each step (the deploy's rule, else Wan 2.2's boundary rule).
    let routing = model.low_noise.as_ref().map(|_| {
        let own = Arc::new(crate::experts::BoundaryRouting { num_train_timesteps: NUM_TRAIN_TIMESTEPS });
        Arc::new(OrModelRule { policy: routing, model: own }) as Arc<dyn fastvideo_pipeline::ExpertRouting>
    });
    let denoiser = WanDenoiser {
        experts: model.experts(),
        offload: model.offload.clone(),
        parallel: model.parallel.clone(),
        z_dim: model.vae.cfg.z_dim,
        temporal: model.vae.cfg.temporal_factor(),
        spatial: model.vae.cfg.spatial_factor(),
    };
    let denoise = DenoiseLoop {
        denoiser: Arc::new(denoiser),
        guidance,
        blocks,
        steps,
        routing,
        contexts: BTreeMap::from([("cond".into(), PROMPT_EMBEDS.into()), ("uncond".into(), NEGATIVE_EMBEDS.into())]),
        initial_latents: INITIAL_LATENTS.to_string(),
        clean_latents: CLEAN_LATENTS.to_string(),
        image_embeds: IMAGE_EMBEDS.to_string(),
        latent_condition: LATENT_CONDITION.to_string(),
        condition: if model.expand_timesteps {
            Arc::new(crate::first_frame_condition::FirstFrameCondition)
        } else {
            Arc::new(fastvideo_pipeline::ChannelCondition)
        },
        output: LATENTS.to_string(),
        preview: Some(Arc::new(crate::preview::WanPreview::new(Arc::clone(&model.vae)))),
    };
    let text = TextEncode {
        tokenizer: model.tokenizer.clone(),
        encoder: Arc::clone(&model.text_encoder),
        default_len: model.max_sequence_length(),
        cache: Arc::clone(&model.text_cache),
    };
    let mut nodes = text_stages;
    nodes.push(Node::stage("text_encode", Arc::new(text), &[], &[PROMPT_EMBEDS, NEGATIVE_EMBEDS]));
    let (name, tasks, denoise_inputs) = match &model.image {
        // Wan 2.2 TI2V: text to video, and text and picture to video, in one graph.
        _ if model.expand_timesteps => {
            let stage = FirstFrameEncode { vae: Arc::clone(&model.vae) };
            nodes.push(Node::stage("image_encode", Arc::new(stage), &[], &[LATENT_CONDITION]));
            ("wan-ti2v", vec![TaskType::T2v, TaskType::T2i, TaskType::I2v], vec![PROMPT_EMBEDS, LATENT_CONDITION])
        }
        Some(image) => {
            let stage = ImageEncode {
                clip: image.clip.clone(),
                vae: Arc::clone(&model.vae),
                last_frame: model.transformer.cfg.pos_embed_seq_len.is_some(),
            };
            nodes.push(Node::stage("image_encode", Arc::new(stage), &[], &[IMAGE_EMBEDS, LATENT_CONDITION]));
            ("wan-i2v", vec![TaskType::I2v], vec![PROMPT_EMBEDS, IMAGE_EMBEDS, LATENT_CONDITION])
        }
        None => {
            let stage = VideoEncode { vae: Arc::clone(&model.vae) };
            nodes.push(Node::stage("video_encode", Arc::new(stage), &[], &[CLEAN_LATENTS]));
            ("wan-t2v", vec![TaskType::T2v, TaskType::T2i, TaskType::V2v], vec![PROMPT_EMBEDS, CLEAN_LATENTS])
        }
    };
    nodes.extend([
        Node::looped("denoise", Arc::new(denoise), &denoise_inputs, &[LATENTS]),
        Node::stage("vae_decode", Arc::new(VaeDecode { vae: Arc::clone(&model.vae) }), &[LATENTS], &[FRAMES]),
        Node::stage("assemble", Arc::new(AssembleVideo { frames: FRAMES, video: VIDEO }), &[FRAMES], &[VIDEO]),
    ]);
    let spec = PipelineSpec::new(name, tasks, nodes, &[], VIDEO)?.with_observers(observers).with_rewards(rewards);
    // Adapters run on a transformer held whole by one device.
    Ok(match model.parallel {
        None => spec.with_adapters(Arc::new(crate::adapters::WanAdapters::of(model))),
        Some(_) => spec,
    })
}

/// The default guidance policy: classic CFG.
pub fn default_guidance() -> Arc<dyn Guidance> {
    Arc::new(ClassicCfg)
}
