//! The runtime-owned denoise loop of an LTX-2 request: one loop over two streams. `init` lays
//! out the video and audio latents (given ones normalised, as the pipeline treats its
//! `latents=` and `audio_latents=`) and the noise levels; `step` runs the passes the guidance
//! asks for — conditional and unconditional batched, then the STG pass and the modality pass
//! — guides each stream with its own scales in x0 space and takes one Euler step of each;
//! `finalize` hands both streams' latents on.

use std::sync::Arc;

use anyhow::{ensure, Context, Result};
use fastvideo_pipeline::denoise::seeded_noise;
use fastvideo_pipeline::{
    AdapterSet, GuidanceState, LoopStage, LoopState, NodeCtx, StepCtx, StepResult, StreamGuidance, StreamPreds, Value,
    Values, ADAPTERS, STREAM_BRANCHES,
};
use fastvideo_request::{ResolvedRequest, TaskType};
use tch::{Kind, Tensor};

use crate::guidance::{guided_velocity, guided_x0, Passes, Scales};
use crate::keyframes::{appended, blend, has_keyframes, keyed_start, placed, Keyed};
use crate::latents::{
    denormalize_audio, noised, normalize_audio, normalize_video, pack_audio, pack_video, unpack_audio, unpack_video,
    Statistics,
};
use crate::model::Geometry;
use crate::refine::{two_stage, BaseParams, RefineParams};
use crate::schedule::Ltx2Schedule;
use crate::stepping::Stepping;
use crate::transformer::{Ltx2Inputs, Ltx2Transformer};
use crate::values::{
    AUDIO_LATENTS, AUDIO_TEXT, CONDITION, KEYFRAME_LATENTS, LATENTS, TEXT_MASK, UPSAMPLED, VIDEO_TEXT,
};

/// The pipeline's default spatio-temporal guidance block.
pub const STG_BLOCKS: [usize; 1] = [28];

/// The loop node.
pub struct Ltx2Denoise {
    /// The transformer.
    pub model: Arc<Ltx2Transformer>,
    /// Its noise levels.
    pub schedule: Arc<Ltx2Schedule>,
    /// Latent shapes.
    pub geometry: Geometry,
    /// Latent statistics.
    pub stats: Arc<Statistics>,
    /// A deploy's stream guider, if it binds one (the base loop's; refine uses its own scales).
    pub guidance: Option<Arc<dyn StreamGuidance>>,
    /// Which loop of the two-stage recipe this node is.
    pub role: Role,
}

/// The base loop (the whole job, or the two-stage recipe's half-size first stage), or the
/// recipe's second, `refine`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// From noise (or `--noise`), at the request's size — half of it with `node_params.refine`.
    Base,
    /// From the upsampled base latents, re-noised, on its own noise levels.
    Refine,
}

/// A loop's starting point: both streams' packed latents (the transformer's scale), the video
/// grid, the audio frames, the noise levels and the scales.
struct Start {
    video: Tensor,
    audio: Tensor,
    grid: [i64; 3],
    audio_frames: i64,
    sigmas: Vec<f32>,
    scales: (Scales, Scales),
    cfg: bool,
    /// Leading video tokens given clean (image to video).
    clean: i64,
    /// Keyframe conditioning.
    keyed: Option<Keyed>,
}

struct State {
    video: Tensor,
    audio: Tensor,
    grid: [i64; 3],
    audio_frames: i64,
    fps: f64,
    sigmas: Vec<f32>,
    /// The step's one forward, laid out once.
    batch: Batch,
    scales: (Scales, Scales),
    /// The passes each step runs, from [`STREAM_BRANCHES`], conditional first.
    branches: Vec<String>,
    /// The blocks the `perturbed` pass perturbs.
    stg: Vec<usize>,
    /// Image to video: the leading video tokens (the first latent frame) kept clean; 0 otherwise.
    clean: i64,
    /// Keyframe conditioning: the mask, clean tokens and positions (the condition pipeline).
    keyed: Option<Keyed>,
    /// A deploy's stream guider and its request state; the pipeline's own rule when `None`.
    plugin: Option<(Arc<dyn StreamGuidance>, GuidanceState)>,
    /// The request's LoRA adapters, if any.
    adapters: Option<Arc<AdapterSet>>,
    /// How a step moves the latents.
    stepping: Stepping,
    step: usize,
}

/// What every step's one forward takes beside the latents, the same each step: each pass's text
/// (the negative prompt's for `uncond`, the prompt's for the others), the STG and exchange masks
/// (0 for the `perturbed` and the `isolated` sample) and image to video's per-token time scale.
struct Batch {
    text: Tensor,
    audio_text: Tensor,
    mask: Tensor,
    perturb: Option<Tensor>,
    exchange: Option<Tensor>,
    /// `[1, N]`: 0 on the clean first frame's tokens, 1 elsewhere.
    keep: Option<Tensor>,
}

impl Batch {
    /// `text` rows: `[negative, prompt]` when a pass needs the negative prompt, else `[prompt]`.
    fn new(branches: &[String], text: [&Tensor; 3], clean: i64, tokens: i64) -> Result<Self> {
        let rows = text[0].size()[0];
        ensure!(
            rows > branches.iter().any(|b| b == "uncond") as i64,
            "ltx2: {rows} text rows for the passes {branches:?} (is the negative prompt encoded?)"
        );
        if let Some(b) = branches.iter().find(|b| !STREAM_BRANCHES.contains(&b.as_str())) {
            anyhow::bail!("ltx2: no pass named `{b}` (passes: {})", STREAM_BRANCHES.join(", "));
        }
        let device = text[0].device();
        let order: Vec<i64> = branches.iter().map(|b| if b == "uncond" { 0 } else { rows - 1 }).collect();
        let idx = Tensor::from_slice(&order).to_device(device);
        let mask = |name: &str| {
            branches.iter().any(|b| b == name).then(|| {
                let m: Vec<f32> = branches.iter().map(|b| if b == name { 0.0 } else { 1.0 }).collect();
                Tensor::from_slice(&m).to_device(device)
            })
        };
        let keep = (clean > 0).then(|| {
            let clean = Tensor::arange(clean, (Kind::Int64, device));
            Tensor::ones([1, tokens], (Kind::Float, device)).index_fill(1, &clean, 0.0)
        });
        Ok(Self {
            text: text[0].index_select(0, &idx),
            audio_text: text[1].index_select(0, &idx),
            mask: text[2].index_select(0, &idx),
            perturb: mask("perturbed"),
            exchange: mask("isolated"),
            keep,
        })
    }
}

/// The request's scales for each stream (knobs default to the pipeline's values). As the
/// pipeline's `audio_x = audio_x or x`, an audio scale of 0 means the video's.
fn scales(req: &ResolvedRequest) -> (Scales, Scales) {
    let k = |name: &str, default: f64| req.knob_f64(name).unwrap_or(default);
    let video = Scales {
        cfg: req.guidance_scale as f64,
        stg: k("stg_scale", 1.0),
        modality: k("modality_scale", 3.0),
        rescale: k("guidance_rescale", 0.7),
    };
    let audio = Scales {
        cfg: k("audio_guidance_scale", 7.0),
        stg: k("audio_stg_scale", 1.0),
        modality: k("audio_modality_scale", 3.0),
        rescale: k("audio_guidance_rescale", 0.7),
    };
    (video, or_video(audio, video))
}

/// The audio's scales as the pipeline reads them (`audio_x = audio_x or x`): each 0 is the video's.
fn or_video(audio: Scales, video: Scales) -> Scales {
    let pick = |a: f64, v: f64| if a == 0.0 { v } else { a };
    Scales {
        cfg: pick(audio.cfg, video.cfg),
        stg: pick(audio.stg, video.stg),
        modality: pick(audio.modality, video.modality),
        rescale: pick(audio.rescale, video.rescale),
    }
}

/// The latent `name` the request gives (`--noise`, in the pipeline call's layout), checked
/// against `shape`.
fn given(req: &ResolvedRequest, name: &str, shape: &[i64], device: tch::Device) -> Result<Option<Tensor>> {
    let l = if name == LATENTS { req.initial_noise.as_ref() } else { req.named_noise.get(name) };
    let Some(l) = l else { return Ok(None) };
    ensure!(
        l.shape == shape,
        "inputs.latent `{name}`: shape {:?} does not match the {:?} this request needs",
        l.shape,
        shape
    );
    Ok(Some(Tensor::from_slice(&l.data).view(l.shape.as_slice()).to_device(device)))
}

impl Ltx2Denoise {
    /// The step's one forward: every pass of `s.batch`, each a sample.
    fn forward(&self, s: &State) -> Result<(Tensor, Tensor)> {
        let kind = self.model.kind();
        let x = &s.batch;
        let b = x.text.size()[0];
        let video = s.video.to_kind(kind).repeat([b, 1, 1]);
        let audio = s.audio.to_kind(kind).repeat([b, 1, 1]);
        let t = s.sigmas[s.step] * 1000.0;
        let timestep = Tensor::full([b], t as f64, (Kind::Float, s.video.device()));
        // Image to video: the clean first frame's tokens at timestep 0, the rest at t.
        let per_token = x.keep.as_ref().map(|keep| timestep.unsqueeze(1) * keep);
        // A set may bind entries to one loop: the base loop runs what binds to 0, refine to 1.
        let stage = if self.role == Role::Refine { 1 } else { 0 };
        let lora = self.model.unmerged(s.adapters.as_deref().map(|a| a.for_expert(stage)))?;
        let positions = s.keyed.as_ref().and_then(|k| k.positions.as_ref());
        let (v, a) = self.model.forward_at(
            &Ltx2Inputs {
                video: &video,
                audio: &audio,
                text: &x.text,
                audio_text: &x.audio_text,
                text_mask: Some(&x.mask),
                audio_text_mask: Some(&x.mask),
                timestep: per_token.as_ref().unwrap_or(&timestep),
                audio_timestep: per_token.as_ref().map(|_| &timestep),
                sigma: Some(&timestep),
                audio_sigma: None,
                grid: s.grid,
                fps: s.fps,
                audio_frames: s.audio_frames,
                isolate_modalities: false,
                exchange_mask: x.exchange.as_ref(),
                stg_blocks: if x.perturb.is_some() { &s.stg } else { &[] },
                perturbation_mask: x.perturb.as_ref(),
                use_cross_timestep: true,
                lora: lora.as_ref(),
            },
            positions,
        )?;
        Ok((v.to_kind(Kind::Float), a.to_kind(Kind::Float)))
    }
}

impl Ltx2Denoise {
    /// Each branch's `(video, audio)` velocity at the current step, in `s.branches` order, and
    /// the passes run: every pass in one batched forward — the negative prompt's row for
    /// `uncond`, the prompt's for the others, the STG blocks perturbing only the `perturbed`
    /// sample and the streams isolated only in the `isolated` one (diffusers runs three forwards:
    /// cond and uncond batched, then each extra pass alone).
    fn passes(&self, s: &State) -> Result<(Vec<(Tensor, Tensor)>, u32)> {
        let (v, a) = self.forward(s)?;
        let n = s.branches.len() as i64;
        Ok(((0..n).map(|i| (v.narrow(0, i, 1), a.narrow(0, i, 1))).collect(), n as u32))
    }
}

/// The passes the pipeline's own rule runs: the conditional one; the unconditional one with
/// classifier-free guidance (`cfg`); the perturbed one when a stream's STG scale is above 0;
/// the isolated one when a stream's modality scale is above 1.
/// (Without an STG block in the model that pass would equal the conditional one: it is skipped.)
fn builtin_branches(cfg: bool, (video, audio): &(Scales, Scales), stg_blocks: bool) -> Vec<String> {
    let mut b = vec!["cond".to_string()];
    if cfg {
        b.push("uncond".into());
    }
    if stg_blocks && (video.stg > 0.0 || audio.stg > 0.0) {
        b.push("perturbed".into());
    }
    if video.modality > 1.0 || audio.modality > 1.0 {
        b.push("isolated".into());
    }
    b
}

/// The streams, in the order a stream guider gets them.
pub const STREAMS: [&str; 2] = ["video", "audio"];

/// Whether `req` needs the negative prompt encoded: classifier-free guidance in either loop, or
/// a stream guider that may ask for it.
pub fn needs_negative(req: &ResolvedRequest, guider: bool) -> bool {
    let refine = RefineParams::of(req).ok().flatten().is_some_and(|p| p.cfg());
    req.does_cfg() || guider || refine
}

impl Ltx2Denoise {
    /// The base loop's start: given latents normalised (as the pipeline treats `latents=` and
    /// `audio_latents=`), else seeded noise; half the size for the two-stage recipe.
    fn base(&self, req: &ResolvedRequest, values: &Values, device: tch::Device) -> Result<Start> {
        if let Some(name) = req.named_noise.keys().find(|n| n.as_str() != AUDIO_LATENTS) {
            anyhow::bail!("inputs: a latent named `{name}`; LTX-2 denoises `latents` and `{AUDIO_LATENTS}`");
        }
        let g = &self.geometry;
        let (height, width) = match two_stage(req) {
            true => {
                let unit = 64.max(2 * g.spatial as u32);
                for (field, v) in [("height", req.height), ("width", req.width)] {
                    ensure!(
                        v % unit == 0,
                        "diffusion.{field}: {v} is not a multiple of {unit}, which the two-stage recipe needs (its \
                         first stage runs at half the size)"
                    );
                }
                (req.height / 2, req.width / 2)
            }
            false => (req.height, req.width),
        };
        let [c, f, h, w] = g.video(req.num_frames, height, width);
        // Keyframes: the appended tokens count in the schedule's token count.
        let conds = match has_keyframes(req) {
            true => {
                ensure!(
                    !two_stage(req),
                    "node_params.refine: keyframe inputs do not run with the two-stage recipe yet; run one stage"
                );
                placed(req, &values.tensor(KEYFRAME_LATENTS)?.to_device(device), g.temporal)
            }
            false => Vec::new(),
        };
        let extra = appended(&conds);
        let base = BaseParams::of(req)?.unwrap_or_default();
        let audio_frames = match base.audio_seconds {
            Some(s) => ((s * g.audio_rate).round() as i64).max(1),
            None => g.audio_frames(req.num_frames, req.fps as f64),
        };
        let sigmas = match &base.sigmas {
            Some(given) => {
                let field = "node_params.denoise.sigmas";
                ensure!(
                    req.schedule.is_none(),
                    "{field}: give the levels here or as diffusion.sigmas/timesteps, not both"
                );
                ensure!(
                    given.len() == req.steps as usize,
                    "{field}: {} levels for {} steps; give one level per step (diffusion.num_inference_steps)",
                    given.len(),
                    req.steps
                );
                given_sigmas(given, field)?
            }
            None => self.schedule.sigmas(req.steps as usize, f * h * w + extra, req.schedule.as_deref())?,
        };
        // Fresh noise at the first level: σ0·noise, as a flow-matching sampler noises an empty
        // latent (1 for the scheduler's own lists).
        let sigma0 = sigmas[0] as f64;
        let [ac, al, am] = g.audio(audio_frames);
        let (vm, vs, scale) = &self.stats.video;
        // Image to video: the first latent frame is clean — the given latents' own (the picture
        // is then unused, as the pipeline does), else the encoded picture over the noise.
        let i2v = req.task == TaskType::I2v && conds.is_empty();
        let given_video = given(req, LATENTS, &[1, c, f, h, w], device)?;
        let normalized =
            |x: &Tensor| pack_video(&normalize_video(x, &vm.to_device(device), &vs.to_device(device), *scale));
        let mut keyed = None;
        let video = match given_video {
            // Keyframes, as the condition pipeline's `latents=` with `noise_scale=0` (given
            // latents are the start), else its own draw over every token at the first level.
            _ if !conds.is_empty() => {
                let (start, noise) = match &given_video {
                    Some(x) => (normalized(x), None),
                    None => {
                        let n = f * h * w;
                        (
                            Tensor::zeros([1, n, c], (Kind::Float, device)),
                            Some(seeded_noise(&[1, n + extra, c], req.seed, device)),
                        )
                    }
                };
                let (cfg, noise) = (&self.model.cfg, noise.as_ref().map(|n| (n, sigma0)));
                let at = (cfg.vae_scale_factors, cfg.causal_offset);
                let (video, k) =
                    keyed_start(&start, &conds, noise, [f, h, w], (g.temporal, g.spatial), at, req.fps as f64)?;
                keyed.replace(k);
                video
            }
            Some(x) => normalized(&x),
            None => {
                let noise = seeded_noise(&[1, c, f, h, w], req.seed, device) * sigma0;
                match i2v {
                    true => {
                        let cond = values.tensor(CONDITION)?.to_device(device);
                        ensure!(cond.size() == [1, c, 1, h, w], "ltx2: condition latents {:?}", cond.size());
                        pack_video(&Tensor::cat(&[cond, noise.narrow(2, 1, f - 1)], 2))
                    }
                    false => pack_video(&noise),
                }
            }
        };
        let (am_, as_) = &self.stats.audio;
        let audio = match given(req, AUDIO_LATENTS, &[1, ac, al, am], device)? {
            Some(x) => normalize_audio(&pack_audio(&x), &am_.to_device(device), &as_.to_device(device)),
            None => pack_audio(&(seeded_noise(&[1, ac, al, am], req.seed.wrapping_add(1), device) * sigma0)),
        };
        let scales = scales(req);
        let clean = if i2v { h * w } else { 0 };
        Ok(Start { video, audio, grid: [f, h, w], audio_frames, sigmas, scales, cfg: req.does_cfg(), clean, keyed })
    }

    /// The refine loop's start: the upsampled video latents and the base loop's audio
    /// latents, normalised, each blended with fresh seeded noise by `noise_scale`.
    fn refine(&self, req: &ResolvedRequest, values: &Values, device: tch::Device) -> Result<Start> {
        let p = RefineParams::of(req)?.unwrap_or_default();
        let up = values.tensor(UPSAMPLED)?.to_kind(Kind::Float).to_device(device);
        let audio = values.tensor(AUDIO_LATENTS)?.to_kind(Kind::Float).to_device(device);
        let (_, _, f, h, w) = up.size5()?;
        let audio_frames = audio.size()[2];
        let (vm, vs, scale) = &self.stats.video;
        let (am, as_) = &self.stats.audio;
        let video = pack_video(&normalize_video(&up, &vm.to_device(device), &vs.to_device(device), *scale));
        let audio = normalize_audio(&pack_audio(&audio), &am.to_device(device), &as_.to_device(device));
        let noise_scale = p.noise_scale.unwrap_or(p.sigmas[0]);
        let fresh = |x: &Tensor, seed: u64| noised(x, &seeded_noise(&x.size(), seed, device), noise_scale);
        // Image to video: the upsampled first frame stays clean (no fresh noise, timestep 0).
        let clean = if req.task == TaskType::I2v { h * w } else { 0 };
        let n = video.size()[1];
        // Streams of their own: the base loop's noise comes from the seed and the seed + 1.
        let seed = p.seed.unwrap_or(req.seed).wrapping_add(2);
        let renoised = fresh(&video, seed);
        let video = match clean {
            0 => renoised,
            k => Tensor::cat(&[video.narrow(1, 0, k), renoised.narrow(1, k, n - k)], 1),
        };
        let audio = fresh(&audio, seed.wrapping_add(1));
        let sigmas = given_sigmas(&p.sigmas, "node_params.refine.sigmas")?;
        let v =
            Scales { cfg: p.guidance_scale, stg: p.stg_scale, modality: p.modality_scale, rescale: p.guidance_rescale };
        let a = Scales {
            cfg: p.audio_guidance_scale,
            stg: p.audio_stg_scale,
            modality: p.audio_modality_scale,
            rescale: p.audio_guidance_rescale,
        };
        let scales = (v, or_video(a, v));
        Ok(Start { video, audio, grid: [f, h, w], audio_frames, sigmas, scales, cfg: p.cfg(), clean, keyed: None })
    }
}

impl LoopStage for Ltx2Denoise {
    fn init(&self, ctx: &NodeCtx, values: &mut Values) -> Result<LoopState> {
        let req = ctx.request;
        let stepping = Stepping::of(req, self.role == Role::Refine)?;
        let adapters = values.adapters(ADAPTERS).cloned();
        ensure!(
            two_stage(req) || !adapters.as_ref().is_some_and(|a| a.is_bound()),
            "lora: an adapter bound to `base` or `refine` needs the two-stage recipe (node_params.refine, \
             --two-stage); without it bind none"
        );
        let start = match self.role {
            Role::Base => self.base(req, values, ctx.device)?,
            Role::Refine => self.refine(req, values, ctx.device)?,
        };
        // A deploy's stream guider names the base loop's passes; the pipeline's rule runs those
        // its scales use.
        let plugin = match &self.guidance {
            Some(g) if self.role == Role::Base && !g.gives_way(req) => {
                let plan = g.init(req, &STREAMS, ctx.meter).context("stream guider init")?;
                Some((Arc::clone(g), plan))
            }
            _ => None,
        };
        // Blocks the model lacks perturb nothing.
        let stg: Vec<usize> = STG_BLOCKS.iter().copied().filter(|&b| b < self.model.cfg.num_layers).collect();
        let (branches, plugin) = match plugin {
            Some((g, plan)) => (plan.branches, Some((g, plan.state))),
            None => (builtin_branches(start.cfg, &start.scales, !stg.is_empty()), None),
        };
        let text = [values.tensor(VIDEO_TEXT)?, values.tensor(AUDIO_TEXT)?, values.tensor(TEXT_MASK)?];
        let mut batch = Batch::new(&branches, text, start.clean, start.video.size()[1])?;
        if let Some(k) = &start.keyed {
            batch.keep = Some(1.0 - &k.mask); // keyframes: each token at `t·(1 − m)`
        }
        let steps = start.sigmas.len() as u32 - 1;
        let state = State {
            video: start.video.to_kind(Kind::Float),
            audio: start.audio.to_kind(Kind::Float),
            grid: start.grid,
            audio_frames: start.audio_frames,
            fps: req.fps as f64,
            sigmas: start.sigmas,
            batch,
            scales: start.scales,
            branches,
            stg,
            clean: start.clean,
            keyed: start.keyed,
            plugin,
            adapters,
            stepping,
            step: 0,
        };
        Ok(LoopState { step: 0, total_steps: steps, inner: Box::new(state) })
    }

    fn step(&self, ctx: &NodeCtx, state: &mut LoopState) -> Result<StepResult> {
        let step_ctx = self.step_ctx(ctx, state).context("ltx2: a step past the schedule")?;
        let s: &mut State = state.get_mut()?;
        let (preds, forwards) = self.passes(s)?;
        let sigma = s.sigmas[s.step] as f64;
        let (gv, ga) = match &mut s.plugin {
            Some((g, st)) => {
                let (video, audio): (Vec<Tensor>, Vec<Tensor>) = preds.into_iter().unzip();
                let streams = [
                    StreamPreds { name: STREAMS[0], latents: &s.video, preds: &video },
                    StreamPreds { name: STREAMS[1], latents: &s.audio, preds: &audio },
                ];
                let mut out = g.combine(&step_ctx, &streams, st)?.into_iter();
                let (Some(v), Some(a)) = (out.next(), out.next()) else { anyhow::bail!("stream guider: two streams") };
                let v = v.to_kind(Kind::Float);
                let v = match &s.keyed {
                    Some(k) => (&s.video - blend(&(&s.video - &v * sigma), &k.mask, &k.clean)) / sigma,
                    None => v,
                };
                (v, a.to_kind(Kind::Float))
            }
            None => {
                let pick = |name: &str, stream: usize| {
                    s.branches
                        .iter()
                        .position(|b| b == name)
                        .map(|i| if stream == 0 { &preds[i].0 } else { &preds[i].1 })
                };
                let passes = |stream| Passes {
                    cond: pick("cond", stream).expect("the conditional pass runs first"),
                    uncond: pick("uncond", stream),
                    perturbed: pick("perturbed", stream),
                    isolated: pick("isolated", stream),
                };
                // Keyframes: the clean estimate blended toward the pictures before the step.
                let video = match &s.keyed {
                    Some(k) => {
                        let x0 = blend(&guided_x0(&s.video, sigma, &passes(0), &s.scales.0), &k.mask, &k.clean);
                        (&s.video - x0) / sigma
                    }
                    None => guided_velocity(&s.video, sigma, &passes(0), &s.scales.0),
                };
                (video, guided_velocity(&s.audio, sigma, &passes(1), &s.scales.1))
            }
        };
        let (next, audio) = s.stepping.step((&s.video, &s.audio), (&gv, &ga), &s.sigmas, s.step);
        // The clean first frame is not stepped.
        s.video = match s.clean {
            0 => next,
            k => Tensor::cat(&[s.video.narrow(1, 0, k), next.narrow(1, k, next.size()[1] - k)], 1),
        };
        s.audio = audio;
        s.step += 1;
        Ok(StepResult { forwards, output: Some(gv), ..Default::default() })
    }

    fn finalize(&self, _ctx: &NodeCtx, state: LoopState, values: &mut Values) -> Result<()> {
        let s = *state.inner.downcast::<State>().map_err(|_| anyhow::anyhow!("loop state is not LTX-2's"))?;
        let video = match &s.keyed {
            Some(k) => s.video.narrow(1, 0, k.tokens), // keyframes: the appended tokens dropped
            None => s.video.shallow_clone(),
        };
        values.insert(LATENTS, Value::Tensor(unpack_video(&video, s.grid)));
        let (m, sd) = &self.stats.audio;
        let audio = denormalize_audio(&s.audio, &m.to_device(s.audio.device()), &sd.to_device(s.audio.device()));
        let mel_bins = self.geometry.mel_bins / crate::model::AUDIO_COMPRESSION;
        values.insert(AUDIO_LATENTS, Value::Tensor(unpack_audio(&audio, mel_bins)));
        Ok(())
    }

    fn step_ctx<'a>(&self, ctx: &NodeCtx<'a>, state: &LoopState) -> Option<StepCtx<'a>> {
        let s = state.inner.downcast_ref::<State>()?;
        (s.step + 1 < s.sigmas.len()).then(|| StepCtx {
            request: ctx.request,
            step_index: s.step as u32,
            num_steps: s.sigmas.len() as u32 - 1,
            timestep: s.sigmas[s.step] * 1000.0,
            sigma: s.sigmas[s.step],
            sigma_next: s.sigmas[s.step + 1],
            expert: 0,
            guidance_scale: s.scales.0.cfg as f32,
        })
    }
}

/// Noise levels as given (`field` names them in errors): descending, then a final 0.
fn given_sigmas(given: &[f64], field: &str) -> Result<Vec<f32>> {
    ensure!(given.windows(2).all(|w| w[1] < w[0]), "{field}: noise levels must descend ({given:?})");
    Ok(given.iter().map(|&s| s as f32).chain([0.0]).collect())
}
