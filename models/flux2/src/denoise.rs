//! The runtime-owned denoise loop of a FLUX.2 request. `init` packs the noise (given, or
//! seeded) into tokens with their positions and builds the request's schedule; `step` runs
//! one Euler step, its guidance branches as samples of one packed forward; `finalize` hands
//! the latents on in the pipeline's `latents=` layout. Requests of any size step together
//! (see [`crate::packed`]): the loop's batch key is one for the whole model, and each
//! request keeps its own timesteps, guidance and schedule.

use std::sync::Arc;

use anyhow::{bail, ensure, Result};
use fastvideo_layers::flow_match::FlowMatchConfig;
use fastvideo_pipeline::denoise::seeded_noise;
use fastvideo_pipeline::sampler::{FlowMatchEuler, Sampler};
use fastvideo_pipeline::{AdapterSet, LoopStage, LoopState, NodeCtx, StepCtx, StepResult, Value, Values, ADAPTERS};
use fastvideo_request::{ResolvedRequest, SamplerKind};
use tch::{Kind, Tensor};

use crate::packed::{positions, text_positions, Sample};
use crate::transformer::Flux2Transformer;
use crate::values::{LATENTS, NEGATIVE_EMBEDS, PROMPT_EMBEDS, REFERENCE_IDS, REFERENCE_TOKENS};

/// The loop node.
pub struct Flux2Denoise {
    /// The transformer.
    pub model: Arc<Flux2Transformer>,
    /// The folder's scheduler.
    pub scheduler: FlowMatchConfig,
    /// Pixels per token side (2 × the VAE's scale).
    pub pixels_per_token: i64,
    /// A step-distilled model: guidance never runs.
    pub distilled: bool,
}

/// One request's loop state.
pub struct FluxState {
    /// Noise tokens `[S, C]` float32.
    latents: Tensor,
    /// Their positions `[S, 4]`.
    ids: Tensor,
    /// The token grid `(h, w)`.
    grid: (i64, i64),
    /// Reference tokens `[N, C]` (model dtype) and their positions, when editing.
    refs: Option<(Tensor, Tensor)>,
    prompt: Tensor,
    negative: Option<Tensor>,
    text_ids: Tensor,
    sampler: FlowMatchEuler,
    guidance: f64,
    /// The request's LoRA adapters, if any.
    adapters: Option<Arc<AdapterSet>>,
}

impl FluxState {
    /// Image tokens `[S + N, C]` and positions of this request's samples.
    fn image(&self, kind: Kind) -> (Tensor, Tensor) {
        let x = self.latents.to_kind(kind);
        match &self.refs {
            Some((r, ids)) => (Tensor::cat(&[x, r.shallow_clone()], 0), Tensor::cat(&[&self.ids, ids], 0)),
            None => (x, self.ids.shallow_clone()),
        }
    }

    /// Tokens every step of this request costs (its samples' joint sequences).
    pub fn tokens(&self) -> u64 {
        let image = self.latents.size()[0] + self.refs.as_ref().map_or(0, |(r, _)| r.size()[0]);
        let per_sample = (image + self.prompt.size()[0]) as u64;
        per_sample * if self.negative.is_some() { 2 } else { 1 }
    }
}

/// `[1, C, h, w]` → tokens `[h·w, C]`.
pub fn pack(latents: &Tensor) -> Tensor {
    let (_, c, h, w) = latents.size4().expect("[1, C, h, w]");
    latents.squeeze_dim(0).view([c, h * w]).tr()
}

/// Tokens `[h·w, C]` → `[1, C, h, w]`.
pub fn unpack(tokens: &Tensor, (h, w): (i64, i64)) -> Tensor {
    let c = tokens.size()[1];
    tokens.tr().reshape([1, c, h, w])
}

impl Flux2Denoise {
    /// Whether `req` runs the negative branch: guidance above 1 on a model that is not
    /// step-distilled, as the pipeline.
    pub fn does_cfg(&self, req: &ResolvedRequest) -> bool {
        req.guidance_scale > 1.0 && !self.distilled
    }

    /// Channels of the noise `[1, C, h, w]` and the token grid of `req`.
    pub fn latent_shape(&self, req: &ResolvedRequest) -> [i64; 4] {
        let c = self.model.config().in_channels;
        let p = self.pixels_per_token;
        [1, c, req.height as i64 / p, req.width as i64 / p]
    }

    fn state(&self, ctx: &NodeCtx, values: &Values) -> Result<FluxState> {
        let req = ctx.request;
        ensure!(
            req.sampler == SamplerKind::Euler,
            "sampling.sampler: FLUX.2 runs its folder's flow-matching Euler scheduler, not `{}`",
            req.sampler.as_str()
        );
        if let Some(name) = req.named_noise.keys().next() {
            bail!("inputs: a latent named `{name}`, which FLUX.2 does not denoise (it takes `latents`)");
        }
        if self.scheduler.use_dynamic_shifting && req.shift != self.scheduler.shift as f32 {
            bail!(
                "diffusion.shift: FLUX.2 shifts its schedule by the picture's size (the folder's \
                 use_dynamic_shifting); a fixed shift of {} does not apply",
                req.shift
            );
        }
        let shape = self.latent_shape(req);
        let latents = match &req.initial_noise {
            Some(l) => {
                ensure!(
                    l.shape == shape,
                    "inputs.latent `latents`: shape {:?} does not match the {:?} this request needs \
                     ([1, 4·latent channels, H/{p}, W/{p}])",
                    l.shape,
                    shape,
                    p = self.pixels_per_token
                );
                Tensor::from_slice(&l.data).view(shape)
            }
            None => seeded_noise(&shape, req.seed, ctx.device),
        };
        let (h, w) = (shape[2], shape[3]);
        let kind = self.model.kind();
        let prompt = values.tensor(PROMPT_EMBEDS)?.to_kind(kind).squeeze_dim(0);
        let negative = match self.does_cfg(req) {
            true => Some(values.tensor(NEGATIVE_EMBEDS)?.to_kind(kind).squeeze_dim(0)),
            false => None,
        };
        let refs = match (values.opt_tensor(REFERENCE_TOKENS), values.opt_tensor(REFERENCE_IDS)) {
            (Some(t), Some(ids)) => Some((t.to_kind(kind), ids.shallow_clone())),
            _ => None,
        };
        let tokens = h * w;
        // An explicit list (`diffusion.timesteps`) is the base the pipeline's `sigmas=` takes.
        let sigmas = match &req.schedule {
            Some(base) => self.scheduler.sigmas(base, crate::schedule::empirical_mu(tokens, req.steps as usize)),
            None => crate::schedule::sigmas(&self.scheduler, tokens, req.steps as usize),
        };
        let sigmas: Vec<f64> = sigmas.iter().map(|&s| s as f64).collect();
        Ok(FluxState {
            latents: pack(&latents.to_device(ctx.device).to_kind(Kind::Float)),
            ids: positions(0, h, w, ctx.device),
            grid: (h, w),
            refs,
            text_ids: text_positions(prompt.size()[0], ctx.device),
            prompt,
            negative,
            sampler: FlowMatchEuler::with_sigmas(&sigmas),
            guidance: req.guidance_scale as f64,
            adapters: values.adapters(ADAPTERS).cloned(),
        })
    }

    /// One step of each of `states` as one packed forward.
    fn step_states(&self, states: &mut [&mut FluxState]) -> Result<Vec<Tensor>> {
        let kind = self.model.kind();
        let images: Vec<(Tensor, Tensor)> = states.iter().map(|s| s.image(kind)).collect();
        let (mut samples, mut sets) = (Vec::new(), Vec::new());
        for (s, (image, ids)) in states.iter().zip(&images) {
            let step = s.sampler.step_index();
            // The pipeline passes `t / 1000`; the transformer multiplies it back.
            let t = s.sampler.timesteps()[step] / 1000.0;
            for text in std::iter::once(&s.prompt).chain(s.negative.as_ref()) {
                samples.push(Sample { image, text, timestep: t, image_ids: ids, text_ids: &s.text_ids });
                sets.push(s.adapters.as_deref());
            }
        }
        let mut preds = self.model.forward_adapted(&samples, &sets)?.into_iter();
        let mut outputs = Vec::new();
        for s in states.iter_mut() {
            let n = s.latents.size()[0];
            let cond = preds.next().expect("one per sample").narrow(0, 0, n).to_kind(Kind::Float);
            let v = match s.negative {
                Some(_) => {
                    let neg = preds.next().expect("one per sample").narrow(0, 0, n).to_kind(Kind::Float);
                    &neg + (&cond - &neg) * s.guidance
                }
                None => cond,
            };
            s.latents = s.sampler.step(&v, &s.latents)?;
            outputs.push(v);
        }
        Ok(outputs)
    }
}

impl LoopStage for Flux2Denoise {
    fn init(&self, ctx: &NodeCtx, values: &mut Values) -> Result<LoopState> {
        let state = self.state(ctx, values)?;
        Ok(LoopState { step: 0, total_steps: ctx.request.steps, inner: Box::new(state) })
    }

    fn step(&self, _ctx: &NodeCtx, state: &mut LoopState) -> Result<StepResult> {
        let s: &mut FluxState = state.get_mut()?;
        let forwards = 1 + s.negative.is_some() as u32;
        let v = self.step_states(&mut [s])?.pop();
        Ok(StepResult { forwards, output: v, ..Default::default() })
    }

    fn finalize(&self, _ctx: &NodeCtx, state: LoopState, values: &mut Values) -> Result<()> {
        let s = *state.inner.downcast::<FluxState>().map_err(|_| anyhow::anyhow!("loop state is not FLUX.2's"))?;
        values.insert(LATENTS, Value::Tensor(unpack(&s.latents, s.grid)));
        Ok(())
    }

    fn step_ctx<'a>(&self, ctx: &NodeCtx<'a>, state: &LoopState) -> Option<StepCtx<'a>> {
        let s = state.inner.downcast_ref::<FluxState>()?;
        StepCtx::of_sampler(ctx.request, &s.sampler, s.guidance as f32)
    }

    /// Every request of the model packs with every other: sizes, reference counts and
    /// guidance may differ.
    fn batch_key(&self, _ctx: &NodeCtx, _state: &LoopState) -> Option<u64> {
        Some(0x464c_5558)
    }

    /// Every branch's joint sequence: the engine packs requests under its token budget.
    fn batch_tokens(&self, _ctx: &NodeCtx, state: &LoopState) -> Option<u64> {
        state.inner.downcast_ref::<FluxState>().map(FluxState::tokens)
    }

    fn step_batch(&self, _ctxs: &[NodeCtx], states: &mut [&mut LoopState]) -> Vec<Result<StepResult>> {
        fastvideo_pipeline::step_packed(
            states,
            |s: &FluxState| 1 + s.negative.is_some() as u32,
            |inner| self.step_states(inner),
        )
    }
}
