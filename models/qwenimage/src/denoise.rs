//! The runtime-owned denoise loop of a Qwen-Image request: Euler over the folder's
//! resolution-shifted schedule, true classifier-free guidance (run only when the request gives a
//! negative prompt, as the pipeline) with the combined prediction rescaled per token to the
//! conditional one's norm. Each guidance branch is a sample of one packed forward, and requests
//! of any size pack together (the batch key is one for the model).

use std::sync::Arc;

use anyhow::{bail, ensure, Result};
use fastvideo_layers::flow_match::FlowMatchConfig;
use fastvideo_pipeline::denoise::seeded_noise;
use fastvideo_pipeline::sampler::{linspace, FlowMatchEuler, Sampler};
use fastvideo_pipeline::{AdapterSet, LoopStage, LoopState, NodeCtx, StepCtx, StepResult, Value, Values, ADAPTERS};
use fastvideo_request::{ResolvedRequest, SamplerKind};
use tch::{Kind, Tensor};

use crate::transformer::{QwenImageTransformer, Sample};
use crate::values::{LATENTS, NEGATIVE_EMBEDS, PROMPT_EMBEDS, REFERENCE_GRIDS, REFERENCE_TOKENS};

/// The sigmas (final 0 included) of `tokens` image tokens and `steps` steps: base
/// `linspace(1, 1/N, N)`, `mu` on the config's line (`calculate_shift`).
pub fn sigmas(cfg: &FlowMatchConfig, tokens: i64, steps: usize) -> Vec<f32> {
    cfg.sigmas(&linspace(1.0, 1.0 / steps as f64, steps), cfg.linear_mu(tokens))
}

/// The loop node.
pub struct QwenImageDenoise {
    /// The transformer.
    pub model: Arc<QwenImageTransformer>,
    /// The folder's scheduler.
    pub scheduler: FlowMatchConfig,
    /// Pixels per token side (2 × the VAE's spatial factor).
    pub pixels_per_token: i64,
}

/// One request's loop state.
pub struct QwenState {
    /// Packed latents `[S, C]` float32.
    latents: Tensor,
    /// Reference latents `[N, C]` (model dtype), when editing.
    refs: Option<Tensor>,
    /// The token grids: the output's, then each reference's.
    grids: Vec<(i64, i64)>,
    prompt: Tensor,
    negative: Option<Tensor>,
    sampler: FlowMatchEuler,
    guidance: f64,
    /// The request's LoRA adapters, if any.
    adapters: Option<Arc<AdapterSet>>,
}

impl QwenState {
    /// Tokens a step of this request costs.
    pub fn tokens(&self) -> u64 {
        let image = (self.latents.size()[0] + self.refs.as_ref().map_or(0, |r| r.size()[0])) as u64;
        let text = |t: &Tensor| t.size()[0] as u64;
        image + text(&self.prompt) + self.negative.as_ref().map_or(0, |n| image + text(n))
    }
}

/// The true-CFG combination, rescaled per token to the conditional prediction's norm.
pub fn true_cfg(cond: &Tensor, neg: &Tensor, scale: f64) -> Tensor {
    let comb = neg + (cond - neg) * scale;
    let norm = |t: &Tensor| t.norm_scalaropt_dim(2.0, [-1i64].as_slice(), true);
    &comb * (norm(cond) / norm(&comb))
}

impl QwenImageDenoise {
    /// The scheduler `req` runs: the folder's (shifted by the picture's size), or with a fixed
    /// shift in its place when the request asks for another shift than the folder's, as
    /// ComfyUI's Qwen-Image templates do (`ModelSamplingAuraFlow`, shift 3.1).
    pub fn schedule_of(&self, req: &ResolvedRequest) -> FlowMatchConfig {
        match req.shift != self.scheduler.shift as f32 {
            true => FlowMatchConfig {
                shift: req.shift as f64,
                use_dynamic_shifting: false,
                shift_terminal: None,
                ..self.scheduler.clone()
            },
            false => self.scheduler.clone(),
        }
    }

    /// Whether `req` runs the negative branch: `true_cfg_scale` (the request's guidance) above 1
    /// and a negative prompt given, as the pipeline.
    pub fn does_cfg(&self, req: &ResolvedRequest) -> bool {
        req.guidance_scale > 1.0 && req.negative_given
    }

    /// The packed latents' shape `[1, S, C]` and the token grid of `req`.
    pub fn latent_shape(&self, req: &ResolvedRequest) -> ([i64; 3], (i64, i64)) {
        let p = self.pixels_per_token;
        let (h, w) = (req.height as i64 / p, req.width as i64 / p);
        ([1, h * w, self.model.config().in_channels], (h, w))
    }

    fn state(&self, ctx: &NodeCtx, values: &Values) -> Result<QwenState> {
        let req = ctx.request;
        ensure!(
            req.sampler == SamplerKind::Euler,
            "sampling.sampler: Qwen-Image runs its folder's flow-matching Euler scheduler, not `{}`",
            req.sampler.as_str()
        );
        if let Some(name) = req.named_noise.keys().next() {
            bail!("inputs: a latent named `{name}`, which Qwen-Image does not denoise (it takes `latents`)");
        }
        let (shape, grid) = self.latent_shape(req);
        let latents = match &req.initial_noise {
            Some(l) => {
                ensure!(
                    l.shape == shape,
                    "inputs.latent `latents`: shape {:?} does not match the {:?} this request needs \
                     ([1, (H/{p})·(W/{p}), 4·z], packed)",
                    l.shape,
                    shape,
                    p = self.pixels_per_token
                );
                Tensor::from_slice(&l.data).view(shape)
            }
            None => seeded_noise(&shape, req.seed, ctx.device),
        };
        let kind = self.model.kind();
        let prompt = values.tensor(PROMPT_EMBEDS)?.to_kind(kind);
        let negative = match self.does_cfg(req) {
            true => Some(values.tensor(NEGATIVE_EMBEDS)?.to_kind(kind)),
            false => None,
        };
        let mut grids = vec![grid];
        let refs = match (values.opt_tensor(REFERENCE_TOKENS), values.opt_tensor(REFERENCE_GRIDS)) {
            (Some(t), Some(g)) => {
                let g: Vec<i64> = Vec::try_from(g.reshape([-1]))?;
                grids.extend(g.chunks(2).map(|c| (c[0], c[1])));
                Some(t.to_kind(kind))
            }
            _ => None,
        };
        let cfg = self.schedule_of(req);
        // An explicit list (`diffusion.timesteps`) is the base the pipeline's `sigmas=` takes.
        let sigmas = match &req.schedule {
            Some(base) => cfg.sigmas(base, cfg.linear_mu(shape[1])),
            None => sigmas(&cfg, shape[1], req.steps as usize),
        };
        let sigmas: Vec<f64> = sigmas.iter().map(|&s| s as f64).collect();
        Ok(QwenState {
            latents: latents.squeeze_dim(0).to_device(ctx.device).to_kind(Kind::Float),
            refs,
            grids,
            prompt,
            negative,
            sampler: FlowMatchEuler::with_sigmas(&sigmas),
            guidance: req.guidance_scale as f64,
            adapters: values.adapters(ADAPTERS).cloned(),
        })
    }

    fn step_states(&self, states: &mut [&mut QwenState]) -> Result<Vec<Tensor>> {
        let kind = self.model.kind();
        let images: Vec<Tensor> = states
            .iter()
            .map(|s| match &s.refs {
                Some(r) => Tensor::cat(&[s.latents.to_kind(kind), r.shallow_clone()], 0),
                None => s.latents.to_kind(kind),
            })
            .collect();
        let (mut samples, mut sets) = (Vec::new(), Vec::new());
        for (s, image) in states.iter().zip(&images) {
            let t = s.sampler.timesteps()[s.sampler.step_index()] / 1000.0;
            for text in std::iter::once(&s.prompt).chain(s.negative.as_ref()) {
                samples.push(Sample { image, grids: &s.grids, text, timestep: t });
                sets.push(s.adapters.as_deref());
            }
        }
        let mut preds = self.model.forward_adapted(&samples, &sets)?.into_iter();
        let mut outputs = Vec::new();
        for s in states.iter_mut() {
            let n = s.latents.size()[0];
            let mut next = || preds.next().expect("one per sample").narrow(0, 0, n).to_kind(Kind::Float);
            let cond = next();
            let v = match s.negative {
                Some(_) => true_cfg(&cond, &next(), s.guidance),
                None => cond,
            };
            s.latents = s.sampler.step(&v, &s.latents)?;
            outputs.push(v);
        }
        Ok(outputs)
    }
}

impl LoopStage for QwenImageDenoise {
    fn init(&self, ctx: &NodeCtx, values: &mut Values) -> Result<LoopState> {
        let state = self.state(ctx, values)?;
        Ok(LoopState { step: 0, total_steps: ctx.request.steps, inner: Box::new(state) })
    }

    fn step(&self, _ctx: &NodeCtx, state: &mut LoopState) -> Result<StepResult> {
        let s: &mut QwenState = state.get_mut()?;
        let forwards = 1 + s.negative.is_some() as u32;
        let v = self.step_states(&mut [s])?.pop();
        Ok(StepResult { forwards, output: v, ..Default::default() })
    }

    fn finalize(&self, _ctx: &NodeCtx, state: LoopState, values: &mut Values) -> Result<()> {
        let s = *state.inner.downcast::<QwenState>().map_err(|_| anyhow::anyhow!("loop state is not Qwen-Image's"))?;
        values.insert(LATENTS, Value::Tensor(s.latents.unsqueeze(0)));
        Ok(())
    }

    fn step_ctx<'a>(&self, ctx: &NodeCtx<'a>, state: &LoopState) -> Option<StepCtx<'a>> {
        let s = state.inner.downcast_ref::<QwenState>()?;
        StepCtx::of_sampler(ctx.request, &s.sampler, s.guidance as f32)
    }

    /// Every request of the model packs with every other.
    fn batch_key(&self, _ctx: &NodeCtx, _state: &LoopState) -> Option<u64> {
        Some(0x5157_494d)
    }

    fn batch_tokens(&self, _ctx: &NodeCtx, state: &LoopState) -> Option<u64> {
        state.inner.downcast_ref::<QwenState>().map(QwenState::tokens)
    }

    fn step_batch(&self, _ctxs: &[NodeCtx], states: &mut [&mut LoopState]) -> Vec<Result<StepResult>> {
        fastvideo_pipeline::step_packed(
            states,
            |s: &QwenState| 1 + s.negative.is_some() as u32,
            |inner| self.step_states(inner),
        )
    }
}
