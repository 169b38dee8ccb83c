//! The denoise loop: one `step` is exactly one solver step — every guidance branch's forward,
//! the guidance combine, and the sampler update.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use anyhow::{bail, ensure, Context, Result};
use fastvideo_request::{OmniEvent, ResolvedRequest};
use tch::{Device, Kind, Tensor};

mod capture;
mod condition;

use capture::Capture;
pub use condition::{ChannelCondition, LatentCondition};

pub use crate::noise::seeded_noise;
use crate::sampler::{self, Sampler};
use crate::{AdapterRows, AdapterSet, ExpertRouting, ExpertRoutingState, Route, ADAPTERS};
use crate::{
    BlockHook, BlockPolicy, BlockPolicyState, BoundHook, Guidance, GuidanceState, LoopStage, LoopState, NodeCtx,
    StepCtx, StepPolicy, StepPolicyState, StepResult, Value, Values,
};

/// What one forward is conditioned on besides the latents and the timestep.
#[derive(Clone, Copy)]
pub struct Conditioning<'a> {
    /// The guidance branch's text embeddings `[B, L, D]`.
    pub text: &'a Tensor,
    /// What the request brings that every branch shares: an image-to-video model's image
    /// embeddings (rows per sample as the model defines them), if any.
    pub image: Option<&'a Tensor>,
    /// The LoRA adapters each row runs with, if any row has some.
    pub adapters: Option<&'a AdapterRows<'a>>,
    /// Which of the denoiser's experts runs (0 for denoisers with one; every row of a forward
    /// runs on the same expert).
    pub expert: u32,
}

impl<'a> Conditioning<'a> {
    /// Text alone.
    pub fn text(text: &'a Tensor) -> Self {
        Self { text, image: None, adapters: None, expert: 0 }
    }
}

/// A model that predicts the flow velocity of latents at a timestep, given its conditioning.
pub trait Denoiser: Send + Sync {
    /// `latents` is `[B, C, …]` in the layout of [`latent_shape`](Self::latent_shape) (with a
    /// request's condition channels appended, when it has any), `timestep` is `[B]` (float),
    /// or what the pipeline's [`LatentCondition`] times its rows by (Wan 2.2 TI2V: `[B, F]`).
    fn forward(&self, latents: &Tensor, timestep: &Tensor, cond: Conditioning) -> Result<Tensor>;
    /// The same forward with a block policy hooked into the block loop. Denoisers without
    /// blocks ignore the hook.
    fn forward_hooked(
        &self,
        latents: &Tensor,
        timestep: &Tensor,
        cond: Conditioning,
        hook: &mut dyn BlockHook,
    ) -> Result<Tensor> {
        let _ = hook;
        self.forward(latents, timestep, cond)
    }
    /// The latents' shape for a request, in the family's own layout: one row, channels second
    /// (Wan: `[1, C, F, H, W]`; a picture model may use `[1, C, H, W]`). The loop keeps to
    /// that layout; only a first-frame condition needs frames (dimension 2).
    fn latent_shape(&self, req: &ResolvedRequest) -> Vec<i64>;
    /// The request's sampler. The default is the flow-matching solver the request names with
    /// its static `shift`; a family whose schedule depends on the request (a shift computed
    /// from the image's sequence length, as FLUX and Qwen-Image do) builds its own here.
    fn sampler(&self, req: &ResolvedRequest) -> Box<dyn Sampler> {
        sampler::build(req)
    }
    /// Whether the rows of one forward run side by side (CFG-parallel: each guidance group on
    /// its own GPUs), so a request's branches should always come as one batch.
    fn splits_batch(&self) -> bool {
        false
    }
    /// How many experts [`Conditioning::expert`] may choose from (Wan 2.2 A14B: 2).
    fn experts(&self) -> u32 {
        1
    }
}

/// The loop node. `contexts` maps each guidance branch name to the value holding its
/// conditioning (e.g. `cond` → `prompt_embeds`).
pub struct DenoiseLoop {
    /// The model evaluated for each guidance branch.
    pub denoiser: Arc<dyn Denoiser>,
    /// Combines the branch predictions into the one the sampler uses.
    pub guidance: Arc<dyn Guidance>,
    /// Optional block policy (a block cache); none costs nothing.
    pub blocks: Option<Arc<dyn BlockPolicy>>,
    /// Optional step interceptor (a step cache such as TaylorSeer); none costs nothing.
    pub steps: Option<Arc<dyn StepPolicy>>,
    /// Chooses each step's expert, for denoisers with several; `None` runs expert 0 with the
    /// request's guidance scale.
    pub routing: Option<Arc<dyn ExpertRouting>>,
    /// Guidance branch name → name of the value holding that branch's conditioning.
    pub contexts: BTreeMap<String, String>,
    /// Value name of optional initial latents (request-supplied noise); seeded noise otherwise.
    pub initial_latents: String,
    /// Value name of optional clean latents to start from (video to video): they are noised to
    /// the request's `strength` and the schedule begins at its `start_step`, as diffusers does.
    /// The initial latents, when given, are then the noise.
    pub clean_latents: String,
    /// Value name of optional image embeddings every branch's forward takes (image-to-video).
    pub image_embeds: String,
    /// Value name of optional condition latents, which reach the denoiser as `condition`
    /// says (appended to the latents' channels: Wan 2.1 image-to-video's mask and encoded first
    /// frame; or Wan 2.2 TI2V's clean first latent frame).
    pub latent_condition: String,
    /// How the condition latents reach the denoiser: the family's rule.
    pub condition: Arc<dyn LatentCondition>,
    /// Value name the denoised latents are written to by `finalize`.
    pub output: String,
    /// Pictures of the estimate for requests that ask for previews (`outputs.preview_every`);
    /// none: no previews (and no cost).
    pub preview: Option<Arc<dyn LatentPreview>>,
}

/// Turns latents (`[1, C, F, h, w]`, the transformer's normalized space) into a small JPEG of
/// their last frame, cheaply: a per-family projection, not the VAE.
pub trait LatentPreview: Send + Sync {
    /// `(width, height, JPEG bytes)`.
    fn preview(&self, latents: &Tensor) -> Result<(u32, u32, Vec<u8>)>;
}

/// Value name under which the loop leaves the request's trajectory when it asked for one.
pub const TRAJECTORY: &str = "trajectory";

struct DenoiseState {
    latents: Tensor,
    /// The loop stops before this step (the schedule's length, or a partial schedule's end).
    end: usize,
    rule: Arc<dyn LatentCondition>,
    sampler: Box<dyn Sampler>,
    capture: Option<Capture>,
    branches: Vec<String>,
    contexts: Vec<Tensor>,
    image: Option<Tensor>,
    condition: Option<Tensor>,
    guidance: GuidanceState,
    /// The block policy's state per expert: a cache's residuals from one expert mean nothing to
    /// the other (cache-dit keeps a context per transformer too).
    blocks: Vec<Box<dyn BlockPolicyState>>,
    /// The step interceptor's state per expert, for the same reason.
    steps: Vec<Box<dyn StepPolicyState>>,
    /// The request's LoRA adapters, if it runs with any.
    adapters: Option<Arc<AdapterSet>>,
    routing: Option<Box<dyn ExpertRoutingState>>,
    /// The next step's route, chosen before it runs (the batch key reads it).
    route: Route,
}

/// Latent elements up to which a request's guidance branches run as one batched forward on CUDA.
/// Measured on the H200 (docs/benchmarks.md): at 17x64x64 a forward is launch-bound and two
/// branches as one batch cost what one does (9.1 -> 5.2 ms per CFG step); at 480x832x81 (2.1 M
/// elements) batching gains 1 % and holds a second forward's activations (~3 GB), so it stops
/// below that. On the CPU a batch of two costs two forwards plus copies: never.
const BRANCH_BATCH_MAX_LATENTS: i64 = 1 << 20;

fn batches_branches(denoiser: &dyn Denoiser, device: Device, s: &DenoiseState) -> bool {
    // FASTVIDEO_NO_BRANCH_BATCH=1: run the branches one by one (a diagnostic, for measuring).
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let batchable =
        s.blocks.is_empty() && s.contexts.len() > 1 && s.contexts.iter().all(|c| c.size() == s.contexts[0].size());
    if denoiser.splits_batch() {
        return batchable;
    }
    batchable
        && device.is_cuda()
        && !*OFF.get_or_init(|| std::env::var_os("FASTVIDEO_NO_BRANCH_BATCH").is_some_and(|v| v != "0"))
        && s.latents.numel() as i64 <= BRANCH_BATCH_MAX_LATENTS
}

impl DenoiseState {
    /// The denoiser's input: the latents, with the condition channels when there are any.
    fn model_input(&self) -> Tensor {
        match &self.condition {
            Some(c) => self.rule.model_input(&self.latents, c),
            None => self.latents.shallow_clone(),
        }
    }

    /// The timesteps of `t.len()` rows of this request's forwards.
    fn timesteps(&self, t: &[f32], device: Device) -> Tensor {
        match &self.condition {
            Some(_) => self.rule.timesteps(t, &self.latents, device),
            None => Tensor::from_slice(t).to_device(device),
        }
    }

    /// The image embeddings for `n` stacked copies of the request's rows.
    fn image_rows(&self, n: usize) -> Option<Tensor> {
        self.image.as_ref().map(|i| if n == 1 { i.shallow_clone() } else { Tensor::cat(&vec![i; n], 0) })
    }

    /// The sampler update with the guided prediction; the trajectory capture sees the latents
    /// it starts from.
    fn advance(&mut self, guided: &Tensor) -> Result<()> {
        if let Some(c) = &mut self.capture {
            c.see(self.sampler.step_index(), &self.latents);
        }
        self.latents = self.sampler.step(guided, &self.latents)?;
        Ok(())
    }
}

impl DenoiseLoop {
    /// A preview of the clean estimate (`x₀ = x − σ·v` for the flow-matching velocity) when the
    /// request asked for one at this step. A failed preview is logged and skipped: it never fails
    /// the request.
    fn preview_event(&self, step: &StepCtx, latents: &Tensor, guided: &Tensor) -> Option<OmniEvent> {
        let every = step.request.outputs.preview_every?;
        let done = step.step_index + 1;
        if !done.is_multiple_of(every) {
            return None;
        }
        let p = self.preview.as_ref()?;
        let x0 = latents - guided * step.sigma as f64;
        match p.preview(&x0) {
            Ok((width, height, jpeg)) => {
                use base64::Engine as _;
                Some(OmniEvent::Preview {
                    request_id: step.request.request_id.clone(),
                    step: done,
                    width,
                    height,
                    jpeg_b64: base64::engine::general_purpose::STANDARD.encode(jpeg),
                })
            }
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "preview skipped");
                None
            }
        }
    }

    /// Where a request is in its schedule, for policies.
    fn step_ctx<'a>(ctx: &NodeCtx<'a>, s: &DenoiseState) -> StepCtx<'a> {
        let i = s.sampler.step_index();
        let sigmas = s.sampler.sigmas();
        StepCtx {
            request: ctx.request,
            step_index: i as u32,
            num_steps: s.sampler.timesteps().len() as u32,
            timestep: s.sampler.timesteps()[i],
            sigma: sigmas[i],
            sigma_next: sigmas.get(i + 1).copied().unwrap_or(0.0),
            expert: s.route.expert,
            guidance_scale: s.route.guidance_scale,
        }
    }

    /// Chooses the next step's route (none after the last step), checked against the experts
    /// the denoiser has.
    fn reroute(&self, ctx: &NodeCtx, s: &mut DenoiseState) -> Result<()> {
        if s.sampler.step_index() >= s.end {
            return Ok(());
        }
        let step = Self::step_ctx(ctx, s);
        let Some(r) = s.routing.as_deref_mut() else { return Ok(()) };
        let route = r.route(&step).context("expert routing")?;
        let n = self.denoiser.experts();
        ensure!(route.expert < n, "expert routing chose expert {} of a denoiser with {n}", route.expert);
        ensure!(
            route.guidance_scale.is_finite(),
            "expert routing gave guidance scale {} (must be finite)",
            route.guidance_scale
        );
        s.route = route;
        Ok(())
    }
}

impl LoopStage for DenoiseLoop {
    fn init(&self, ctx: &NodeCtx, values: &mut Values) -> Result<LoopState> {
        let req = ctx.request;
        // A request naming adapters runs with them or not at all: a front end that prepared none
        // would otherwise run the plain weights silently.
        if !req.lora.is_empty() && values.adapters(ADAPTERS).is_none() {
            anyhow::bail!("lora: the request names LoRA adapters, but this run was given none prepared");
        }
        if let Some(name) = req.named_noise.keys().next() {
            bail!("inputs: a latent named `{name}`, but this model denoises only `latents`");
        }
        let shape = self.denoiser.latent_shape(req);
        let supplied = match (values.opt_tensor(&self.initial_latents), &req.initial_noise) {
            (Some(t), _) => Some(t.shallow_clone()),
            (None, Some(l)) => Some(Tensor::from_slice(&l.data).view(l.shape.as_slice())),
            (None, None) => None,
        };
        let noise = match supplied {
            Some(t) => {
                ensure!(
                    t.size() == shape,
                    "inputs.latent: shape {:?} does not match the {:?} this request needs",
                    t.size(),
                    shape
                );
                t.to_kind(Kind::Float).to_device(ctx.device)
            }
            None => seeded_noise(&shape, req.seed, ctx.device),
        };
        let mut sampler = self.denoiser.sampler(req);
        let start = req.start_step() as usize;
        let latents = match values.opt_tensor(&self.clean_latents) {
            Some(clean) => {
                ensure!(
                    clean.size() == shape,
                    "denoise: clean latents {:?} do not match the {:?} this request needs",
                    clean.size(),
                    shape
                );
                sampler.begin_at(start).context("denoise: starting the schedule at the request's strength")?;
                // diffusers' add_noise / scale_noise: (1 - σ)·x + σ·noise at the first step run.
                let sigma = sampler.sigmas()[start] as f64;
                clean.to_kind(Kind::Float).to_device(ctx.device) * (1.0 - sigma) + noise * sigma
            }
            // A partial schedule from given latents: they are taken as they are.
            None if start > 0 && req.partial.is_some() => {
                sampler.begin_at(start).context("denoise: starting the partial schedule")?;
                noise
            }
            None => {
                ensure!(start == 0, "denoise: strength below 1 needs clean latents to start from (a video input)");
                match sampler.initial_noise_scale() {
                    1.0 => noise,
                    scale => noise * scale,
                }
            }
        };
        let end = req.partial.map_or(sampler.timesteps().len(), |p| p.end as usize);
        let image = values.opt_tensor(&self.image_embeds).map(|t| t.shallow_clone());
        let condition = match values.opt_tensor(&self.latent_condition) {
            Some(c) => {
                self.condition.check(c, &latents)?;
                Some(c.to_device(ctx.device))
            }
            None => None,
        };
        let plan = self.guidance.init(req, ctx.meter).context("guidance init")?;
        let branches = plan.branches;
        let mut contexts = Vec::with_capacity(branches.len());
        for b in &branches {
            let Some(name) = self.contexts.get(b) else {
                bail!("guidance branch `{b}` has no conditioning value bound in this pipeline");
            };
            contexts.push(values.tensor(name)?.shallow_clone());
        }
        let mut state = DenoiseState {
            latents,
            end,
            rule: Arc::clone(&self.condition),
            sampler,
            capture: Capture::of(req),
            branches,
            contexts,
            image,
            condition,
            guidance: plan.state,
            blocks: match &self.blocks {
                Some(p) => (0..self.denoiser.experts())
                    .map(|_| p.init(req, ctx.meter).context("block policy init"))
                    .collect::<Result<_>>()?,
                None => Vec::new(),
            },
            steps: match &self.steps {
                Some(p) => (0..self.denoiser.experts())
                    .map(|_| p.init(req, ctx.meter).context("step interceptor init"))
                    .collect::<Result<_>>()?,
                None => Vec::new(),
            },
            adapters: values.adapters(ADAPTERS).cloned(),
            routing: match &self.routing {
                Some(r) => Some(r.init(req, self.denoiser.experts(), ctx.meter).context("expert routing init")?),
                None => None,
            },
            route: Route { expert: 0, guidance_scale: req.guidance_scale },
        };
        self.reroute(ctx, &mut state)?;
        Ok(LoopState { step: 0, total_steps: (end - start) as u32, inner: Box::new(state) })
    }

    fn step(&self, ctx: &NodeCtx, state: &mut LoopState) -> Result<StepResult> {
        let s: &mut DenoiseState = state.get_mut()?;
        let step = Self::step_ctx(ctx, s);
        let supplied = match s.steps.get_mut(step.expert as usize).map(|p| p.as_mut()) {
            Some(p) => p.before_step(&step, &s.latents).context("step interceptor before-step")?,
            None => None,
        };
        let (guided, forwards) = match supplied {
            Some(out) => {
                ensure!(
                    out.size() == s.latents.size(),
                    "step interceptor supplied an output of shape {:?}; the latents have {:?}",
                    out.size(),
                    s.latents.size()
                );
                (out, 0)
            }
            None if batches_branches(self.denoiser.as_ref(), ctx.device, s) => {
                let n = s.contexts.len();
                let timestep = s.timesteps(&vec![step.timestep; n], ctx.device);
                let input = s.model_input();
                let x = Tensor::cat(&vec![&input; n], 0);
                let (text, image) = (Tensor::cat(&s.contexts, 0), s.image_rows(n));
                let rows = AdapterRows::all(s.adapters.as_deref(), n as i64);
                let expert = s.route.expert;
                let cond = Conditioning { text: &text, image: image.as_ref(), adapters: rows.as_ref(), expert };
                let preds = self
                    .denoiser
                    .forward(&x, &timestep, cond)
                    .context("forward of the guidance branches as one batch")?
                    .split(1, 0);
                (self.guidance.combine(&step, &preds, &mut s.guidance)?, n as u32)
            }
            None => {
                let timestep = s.timesteps(&[step.timestep], ctx.device);
                let mut preds = Vec::with_capacity(s.branches.len());
                let x = s.model_input();
                let rows = AdapterRows::all(s.adapters.as_deref(), 1);
                for (b, c) in s.branches.iter().zip(&s.contexts) {
                    let expert = s.route.expert;
                    let cond = Conditioning { text: c, image: s.image.as_ref(), adapters: rows.as_ref(), expert };
                    let p = match s.blocks.get_mut(expert as usize) {
                        Some(state) => {
                            let state = state.as_mut();
                            let mut hook = BoundHook { state, step: &step, branch: b };
                            self.denoiser.forward_hooked(&x, &timestep, cond, &mut hook)
                        }
                        None => self.denoiser.forward(&x, &timestep, cond),
                    }
                    .with_context(|| format!("forward of branch `{b}`"))?;
                    preds.push(p);
                }
                (self.guidance.combine(&step, &preds, &mut s.guidance)?, preds.len() as u32)
            }
        };
        let mut emit: Vec<OmniEvent> = self.preview_event(&step, &s.latents, &guided).into_iter().collect();
        s.advance(&guided)?;
        if let Some(p) = s.steps.get_mut(step.expert as usize) {
            p.after_step(&step, &guided).context("step interceptor after-step")?;
            emit.extend(p.take_events());
        }
        for b in &mut s.blocks {
            emit.extend(b.take_events());
        }
        self.reroute(ctx, s)?;
        let done = s.sampler.step_index() >= s.end;
        Ok(StepResult { done, emit, forwards, output: Some(guided) })
    }

    fn step_ctx<'a>(&self, ctx: &NodeCtx<'a>, state: &LoopState) -> Option<StepCtx<'a>> {
        let s = state.inner.downcast_ref::<DenoiseState>()?;
        (s.sampler.step_index() < s.end).then(|| Self::step_ctx(ctx, s))
    }

    /// Batchable when no block policy or step interceptor is bound (their state is per request) and
    /// the latents, branches and conditioning shapes agree; steps and timesteps may differ (the
    /// denoiser takes one timestep per batch row).
    fn batch_key(&self, _ctx: &NodeCtx, state: &LoopState) -> Option<u64> {
        if self.blocks.is_some() || self.steps.is_some() {
            return None;
        }
        let s = state.inner.downcast_ref::<DenoiseState>()?;
        let mut h = std::collections::hash_map::DefaultHasher::new();
        s.latents.size().hash(&mut h);
        // A batch never mixes experts: each forward runs one expert's weights.
        s.route.expert.hash(&mut h);
        s.image.as_ref().map(|t| t.size()).hash(&mut h);
        s.condition.as_ref().map(|t| t.size()).hash(&mut h);
        format!("{:?}", s.latents.device()).hash(&mut h);
        for (b, c) in s.branches.iter().zip(&s.contexts) {
            b.hash(&mut h);
            c.size().hash(&mut h);
        }
        Some(h.finish())
    }

    /// Every branch of every request in one forward (rows: request-major, branch-minor), then
    /// each request's guidance combine and sampler update on its own rows.
    fn step_batch(&self, ctxs: &[NodeCtx], states: &mut [&mut LoopState]) -> Vec<Result<StepResult>> {
        if states.len() < 2 || self.blocks.is_some() || self.steps.is_some() {
            return ctxs.iter().zip(states.iter_mut()).map(|(c, s)| self.step(c, s)).collect();
        }
        let batch = (|| -> Result<Vec<Tensor>> {
            let (mut x, mut c, mut images) = (Vec::new(), Vec::new(), Vec::new());
            let mut timesteps = Vec::new();
            let mut sets: Vec<(Option<Arc<AdapterSet>>, i64)> = Vec::new();
            let mut expert = None;
            for st in states.iter_mut() {
                let s: &mut DenoiseState = st.get_mut()?;
                ensure!(
                    *expert.get_or_insert(s.route.expert) == s.route.expert,
                    "a batch mixes experts (the batch key keeps them apart)"
                );
                let ts = s.sampler.timesteps()[s.sampler.step_index()];
                let input = s.model_input();
                for ctx in &s.contexts {
                    x.push(input.shallow_clone());
                    c.push(ctx.shallow_clone());
                }
                timesteps.push(s.timesteps(&vec![ts; s.contexts.len()], ctxs[0].device));
                // Same batch key, so every request has an image or none does.
                images.extend(s.image_rows(s.contexts.len()));
                sets.push((s.adapters.clone(), s.contexts.len() as i64));
            }
            // Each request's rows with its own adapters: requests with different sets share the
            // step (the unmerged path gathers rows per set).
            let mut rows = AdapterRows::default();
            let mut start = 0;
            for (set, n) in &sets {
                rows.push(set.as_deref(), start, *n);
                start += n;
            }
            // Same batch key, so every request's timesteps have the same shape past the rows.
            let timestep = Tensor::cat(&timesteps, 0);
            let image = (!images.is_empty()).then(|| Tensor::cat(&images, 0));
            let text = Tensor::cat(&c, 0);
            let adapters = (!rows.is_empty()).then_some(&rows);
            let cond = Conditioning { text: &text, image: image.as_ref(), adapters, expert: expert.unwrap_or(0) };
            let out = self.denoiser.forward(&Tensor::cat(&x, 0), &timestep, cond)?;
            Ok(out.split(1, 0))
        })();
        let rows = match batch {
            Ok(rows) => rows,
            Err(e) => {
                let msg = format!("batched forward of {} requests: {e:#}", states.len());
                return states.iter().map(|_| Err(anyhow::anyhow!(msg.clone()))).collect();
            }
        };
        let mut rows = rows.into_iter();
        ctxs.iter()
            .zip(states.iter_mut())
            .map(|(ctx, st)| {
                let s: &mut DenoiseState = st.get_mut()?;
                let preds: Vec<Tensor> = rows.by_ref().take(s.branches.len()).collect();
                let step = Self::step_ctx(ctx, s);
                let guided = self.guidance.combine(&step, &preds, &mut s.guidance)?;
                let emit = self.preview_event(&step, &s.latents, &guided).into_iter().collect();
                s.advance(&guided)?;
                self.reroute(ctx, s)?;
                let done = s.sampler.step_index() >= s.end;
                Ok(StepResult { done, emit, forwards: preds.len() as u32, output: Some(guided) })
            })
            .collect()
    }

    fn finalize(&self, ctx: &NodeCtx, state: LoopState, values: &mut Values) -> Result<()> {
        let s = state.inner.downcast::<DenoiseState>().map_err(|_| anyhow::anyhow!("denoise: wrong loop state"))?;
        if let Some(c) = s.capture {
            let t = c.into_artifact(ctx.request, s.sampler.as_ref(), &s.latents)?;
            values.insert(TRAJECTORY, Value::Trajectory(Box::new(t)));
        }
        let out = match &s.condition {
            Some(c) => s.rule.output(s.latents, c),
            None => s.latents,
        };
        values.insert(self.output.clone(), Value::Tensor(out));
        Ok(())
    }
}
