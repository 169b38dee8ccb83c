//! The runtime-owned denoise loop of a Cosmos3 request: `init` packs each guidance branch and
//! runs its prompt once (the prefix cache), `step` is one solver step of every modality — all
//! branches' forwards batched, classifier-free guidance with one scale for vision, sound and
//! action, one UniPC per modality — and `finalize` hands the latents on. Clean (conditioning)
//! frames get zero velocity, which UniPC keeps clean.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};
use fastvideo_pipeline::denoise::seeded_noise;
use fastvideo_pipeline::packed::PackedSeq;
use fastvideo_pipeline::sampler::{linspace, Sampler, UniPc, UniPcConfig, NUM_TRAIN_TIMESTEPS};
use fastvideo_pipeline::{LoopStage, LoopState, NodeCtx, StepCtx, StepResult, Value, Values};
use fastvideo_request::ResolvedRequest;
use tch::{Kind, Tensor};

use crate::packing::{pack, Layout};
use crate::transformer::{Cosmos3Transformer, GenInput, Prefix};
use crate::values::{
    ACTION_CLEAN, ACTION_CONDITION, ACTION_LATENTS, CLEAN_FRAMES, CONDITION_LATENTS, LATENTS, NEGATIVE_IDS, PROMPT_IDS,
    SOUND_LATENTS,
};

/// The scheduler settings of a folder (`scheduler/scheduler_config.json`, `model_index.json`).
#[derive(Clone, Debug)]
pub struct Schedule {
    /// UniPC's shift, order and final-steps rule.
    pub unipc: UniPcConfig,
    /// `use_native_flow_schedule`: base sigmas `linspace(1 - 1/1000, 0, N + 1)[:-1]`.
    pub native: bool,
}

impl Schedule {
    /// A fresh solver for a request: its steps and its `shift` (the folder's, unless it gave one).
    pub fn for_request(&self, req: &ResolvedRequest) -> UniPc {
        let unipc = UniPcConfig { flow_shift: req.shift as f64, ..self.unipc.clone() };
        match &req.schedule {
            // An explicit list (`diffusion.timesteps`): the base the scheduler's `sigmas=` takes.
            Some(base) => UniPc::with_base_sigmas(unipc, base.clone()),
            None => Schedule { unipc, native: self.native }.sampler(req.steps as usize),
        }
    }

    /// A fresh solver for `steps` steps.
    pub fn sampler(&self, steps: usize) -> UniPc {
        if self.native {
            let n = NUM_TRAIN_TIMESTEPS as f64;
            let mut base = linspace(1.0 - 1.0 / n, 0.0, steps + 1);
            base.pop();
            UniPc::with_base_sigmas(self.unipc.clone(), base)
        } else {
            UniPc::new(self.unipc.clone(), steps)
        }
    }
}

/// What the loop needs of the loaded model besides the transformer.
#[derive(Clone, Debug)]
pub struct Geometry {
    /// VAE latent channels.
    pub z_dim: i64,
    /// Video frames per latent frame.
    pub temporal: i64,
    /// Pixels per latent cell.
    pub spatial: i64,
    /// `(sample rate, hop)` of the sound tokenizer, when the model makes sound.
    pub sound: Option<(u32, i64)>,
}

impl Geometry {
    /// Vision latent `[C, T, h, w]` of a request.
    pub fn vision(&self, req: &ResolvedRequest) -> [i64; 4] {
        let t = (req.num_frames as i64 - 1) / self.temporal + 1;
        [self.z_dim, t, req.height as i64 / self.spatial, req.width as i64 / self.spatial]
    }

    /// Sound latent frames of a request that asks for sound: `ceil(int(F/fps·sr) / hop)`.
    pub fn sound_frames(&self, req: &ResolvedRequest) -> Option<i64> {
        let (rate, hop) = self.sound.filter(|_| req.generate_sound)?;
        let samples = (req.num_frames as f64 / req.fps as f64 * rate as f64) as i64;
        Some((samples + hop - 1) / hop)
    }
}

/// The loop node.
pub struct OmniDenoise {
    /// The transformer.
    pub model: Arc<Cosmos3Transformer>,
    /// Its solver settings.
    pub schedule: Schedule,
    /// Latent geometry.
    pub geometry: Geometry,
}

struct Branch {
    seq: PackedSeq,
    prefix: Prefix,
}

/// The actions of an action task: their latents, their solver (none when every step is
/// given: forward dynamics), the embodiment and its width (columns past it stay zero).
struct ActionState {
    latents: Tensor,
    sampler: Option<UniPc>,
    domain: i64,
    width: i64,
}

/// `x` with the columns past `width` zeroed, as the reference keeps an embodiment's unused
/// action columns (in the noise, every velocity and after every step).
fn zero_past(width: i64, x: &Tensor) -> Tensor {
    let cols = x.size()[x.dim() - 1];
    if width >= cols {
        return x.shallow_clone();
    }
    let keep = Tensor::ones([cols], (Kind::Float, x.device())).index_fill(
        0,
        &Tensor::arange_start(width, cols, (Kind::Int64, x.device())),
        0.0,
    );
    x * keep
}

struct OmniState {
    branches: Vec<Branch>,
    vision: Tensor,
    sound: Option<Tensor>,
    action: Option<ActionState>,
    vision_sampler: UniPc,
    sound_sampler: Option<UniPc>,
    guidance: f64,
    step: usize,
}

/// A request-supplied latent named `name` of exactly `shape`, if any.
fn given(
    req: &ResolvedRequest,
    values: &Values,
    name: &str,
    shape: &[i64],
    device: tch::Device,
) -> Result<Option<Tensor>> {
    let given = values.opt_tensor(name).map(|t| t.shallow_clone()).or_else(|| {
        let l = if name == LATENTS { req.initial_noise.as_ref() } else { req.named_noise.get(name) };
        l.map(|l| Tensor::from_slice(&l.data).view(l.shape.as_slice()))
    });
    let Some(t) = given else { return Ok(None) };
    ensure!(
        t.size() == shape,
        "inputs.latent `{name}`: shape {:?} does not match the {:?} this request needs",
        t.size(),
        shape
    );
    Ok(Some(t.to_kind(Kind::Float).to_device(device)))
}

/// The initial vision latents `[1, C, T, h, w]`: given ones as they are (the reference's
/// `latents=`), else seeded noise with the clean frames taken from `clean`.
fn initial_vision(
    req: &ResolvedRequest,
    values: &Values,
    shape: &[i64],
    clean: Option<(&Tensor, &[i64])>,
    device: tch::Device,
) -> Result<Tensor> {
    if let Some(t) = given(req, values, LATENTS, shape, device)? {
        return Ok(t);
    }
    let noise = seeded_noise(shape, req.seed, device);
    let Some((x0, frames)) = clean else { return Ok(noise) };
    ensure!(x0.size() == shape, "condition latents {:?} do not match the {:?} this request needs", x0.size(), shape);
    let idx = Tensor::from_slice(frames).to_device(device);
    Ok(noise.index_copy(2, &idx, &x0.to_device(device).index_select(2, &idx)))
}

/// Whether the unconditional branch runs: the pipeline's `guidance_scale != 1` (a scale below 1
/// blends towards the negative prompt; 1 is the conditional prediction alone).
pub fn does_cfg(req: &ResolvedRequest) -> bool {
    req.guidance_scale != 1.0
}

impl OmniDenoise {
    /// An action task's initial actions and which steps are given clean: the given
    /// `action_latents` as they are, else seeded noise with the clean steps taken from the
    /// condition and the columns past the embodiment's width zeroed.
    fn initial_actions(
        &self,
        req: &ResolvedRequest,
        values: &Values,
        device: tch::Device,
    ) -> Result<Option<(ActionState, Vec<i64>)>> {
        let Some(a) = &req.action else { return Ok(None) };
        let dim = self.model.config().action().context("an action task on a model without action heads")?;
        let x0 = values.tensor(ACTION_CONDITION)?;
        let clean: Vec<i64> = Vec::try_from(values.tensor(ACTION_CLEAN)?.to_kind(Kind::Int64).reshape([-1]))?;
        let shape = [a.chunk_size as i64, dim];
        let mut state =
            ActionState { latents: Tensor::new(), sampler: None, domain: a.domain_id as i64, width: a.width as i64 };
        state.latents = match given(req, values, ACTION_LATENTS, &shape, device)? {
            Some(x) => x,
            None => {
                let noise = seeded_noise(&shape, req.seed.wrapping_add(2), device);
                let mixed = if clean.is_empty() {
                    noise
                } else {
                    let idx = Tensor::from_slice(&clean).to_device(device);
                    noise.index_copy(0, &idx, &x0.to_device(device).index_select(0, &idx))
                };
                zero_past(state.width, &mixed)
            }
        };
        if (clean.len() as i64) < shape[0] {
            state.sampler = Some(self.schedule.for_request(req));
        }
        Ok(Some((state, clean)))
    }
}

impl LoopStage for OmniDenoise {
    fn init(&self, ctx: &NodeCtx, values: &mut Values) -> Result<LoopState> {
        let req = ctx.request;
        ensure!(
            req.sampler == fastvideo_request::SamplerKind::Unipc,
            "sampling.sampler: Cosmos3 runs the UniPC solver of its folder's scheduler, not `{:?}`",
            req.sampler
        );
        // Latents given under a name this request does not denoise would be dropped silently.
        let takes = |name: &str| match name {
            SOUND_LATENTS => self.geometry.sound_frames(req).is_some(),
            ACTION_LATENTS => req.action.is_some(),
            _ => false,
        };
        if let Some(name) = req.named_noise.keys().find(|n| !takes(n)) {
            bail!("inputs: a latent named `{name}`, which this request does not denoise");
        }
        // An action task's latents are the content's crop of the canvas (its condition's size).
        let [c, t, h, w] = match (&req.action, values.opt_tensor(CONDITION_LATENTS)) {
            (Some(_), Some(x0)) => {
                let (_, c, t, h, w) = x0.size5()?;
                [c, t, h, w]
            }
            _ => self.geometry.vision(req),
        };
        let sound_frames = self.geometry.sound_frames(req);
        let clean: Vec<i64> = match values.opt_tensor(CLEAN_FRAMES) {
            Some(f) => Vec::try_from(f.to_kind(Kind::Int64).reshape([-1]))?,
            None => Vec::new(),
        };
        let condition = values.opt_tensor(CONDITION_LATENTS).map(|x0| (x0, clean.as_slice()));
        let vision = initial_vision(req, values, &[1, c, t, h, w], condition, ctx.device)?.squeeze_dim(0);
        let sound = match (sound_frames, self.model.config().sound()) {
            (Some(n), Some(dim)) => Some(match given(req, values, SOUND_LATENTS, &[dim, n], ctx.device)? {
                Some(x) => x,
                None => seeded_noise(&[dim, n], req.seed.wrapping_add(1), ctx.device),
            }),
            _ => None,
        };
        let action = self.initial_actions(req, values, ctx.device)?;
        let layout = Layout {
            vision: [t, h, w],
            vision_clean: clean.clone(),
            temporal_compression: self.geometry.temporal,
            fps: req.fps as f64,
            sound: sound_frames,
            action: action.as_ref().map(|(a, clean)| (a.latents.size()[0], clean.clone())),
        };
        let action = action.map(|(a, _)| a);
        let mut names = vec![PROMPT_IDS];
        if does_cfg(req) {
            names.push(NEGATIVE_IDS);
        }
        let started = Instant::now();
        let mut branches = Vec::new();
        for name in names {
            let ids: Vec<i64> = Vec::try_from(values.tensor(name)?.to_kind(Kind::Int64).reshape([-1]))?;
            let seq = pack(self.model.config(), ids.len() as i64, &layout)?;
            let positions = seq.positions(ctx.device).narrow(1, 0, seq.prefix_len());
            let prefix = self.model.prefix(&ids, &positions).with_context(|| format!("the prompt of `{name}`"))?;
            branches.push(Branch { seq, prefix });
        }
        tracing::debug!(
            prefix_ms = started.elapsed().as_secs_f64() * 1e3,
            bytes = branches.iter().map(|b| b.prefix.bytes()).sum::<u64>(),
            "cosmos3: prompt prefixes computed once for the whole loop"
        );
        let steps = req.steps as usize;
        let sampler = || self.schedule.for_request(req);
        let state = OmniState {
            branches,
            vision,
            sound_sampler: sound.as_ref().map(|_| sampler()),
            sound,
            action,
            vision_sampler: sampler(),
            guidance: req.guidance_scale as f64,
            step: 0,
        };
        Ok(LoopState { step: 0, total_steps: steps as u32, inner: Box::new(state) })
    }

    fn step(&self, _ctx: &NodeCtx, state: &mut LoopState) -> Result<StepResult> {
        let s: &mut OmniState = state.get_mut()?;
        let timestep = s.vision_sampler.timesteps()[s.step] as f64;
        let input = GenInput {
            vision: &s.vision,
            sound: s.sound.as_ref(),
            action: s.action.as_ref().map(|a| &a.latents),
            domain: s.action.as_ref().map(|a| a.domain),
            timestep,
        };
        let seqs: Vec<&PackedSeq> = s.branches.iter().map(|b| &b.seq).collect();
        let prefixes: Vec<&Prefix> = s.branches.iter().map(|b| &b.prefix).collect();
        let pred = self.model.forward(&seqs, &prefixes, &input)?;
        let guide = |p: &Tensor| -> Tensor {
            if p.size()[0] == 1 {
                return p.get(0);
            }
            let (cond, uncond) = (p.get(0), p.get(1));
            &uncond + (&cond - &uncond) * s.guidance
        };
        let v = guide(&pred.vision);
        s.vision = s.vision_sampler.step(&v.unsqueeze(0), &s.vision.unsqueeze(0))?.squeeze_dim(0);
        if let (Some(x), Some(p), Some(sampler)) = (&s.sound, &pred.sound, s.sound_sampler.as_mut()) {
            let v = guide(p);
            s.sound = Some(sampler.step(&v.unsqueeze(0), &x.unsqueeze(0))?.squeeze_dim(0));
        }
        if let (Some(a), Some(p)) = (s.action.as_mut(), &pred.action) {
            let width = a.width;
            if let Some(sampler) = a.sampler.as_mut() {
                let v = zero_past(width, &guide(p));
                let next = sampler.step(&v.unsqueeze(0), &a.latents.unsqueeze(0))?.squeeze_dim(0);
                a.latents = zero_past(width, &next);
            }
        }
        s.step += 1;
        Ok(StepResult { forwards: s.branches.len() as u32, output: Some(v), ..Default::default() })
    }

    fn finalize(&self, _ctx: &NodeCtx, state: LoopState, values: &mut Values) -> Result<()> {
        let s = *state.inner.downcast::<OmniState>().map_err(|_| anyhow::anyhow!("loop state is not Cosmos3's"))?;
        values.insert(LATENTS, Value::Tensor(s.vision.unsqueeze(0)));
        if let Some(x) = s.sound {
            values.insert(SOUND_LATENTS, Value::Tensor(x));
        }
        if let Some(a) = s.action {
            values.insert(ACTION_LATENTS, Value::Tensor(a.latents));
        }
        Ok(())
    }

    fn step_ctx<'a>(&self, ctx: &NodeCtx<'a>, state: &LoopState) -> Option<StepCtx<'a>> {
        let s = state.inner.downcast_ref::<OmniState>()?;
        let (timesteps, sigmas) = (s.vision_sampler.timesteps(), s.vision_sampler.sigmas());
        (s.step < timesteps.len()).then(|| StepCtx {
            request: ctx.request,
            step_index: s.step as u32,
            num_steps: timesteps.len() as u32,
            timestep: timesteps[s.step],
            sigma: sigmas[s.step],
            sigma_next: sigmas.get(s.step + 1).copied().unwrap_or(0.0),
            expert: 0,
            guidance_scale: s.guidance as f32,
        })
    }
}
