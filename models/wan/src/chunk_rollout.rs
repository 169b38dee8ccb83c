//! The chunk rollout of a world model (DESIGN §3 `ChunkRollout`): an outer loop over chunks of
//! latent frames holding a key/value session, an inner few-step denoise per chunk, the pass over
//! the clean chunk that commits its keys and values, and the incremental VAE decode that turns
//! each finished chunk into video frames at once.
//!
//! The runtime drives it one unit at a time ([`ChunkRollout::step_guided`]): one denoise step, or
//! one commit pass plus its decode, so a scheduler interleaves sessions with other work at the
//! same boundaries as denoise steps. Each denoise step is the pipeline's: every guidance branch's
//! forward, the combine ([`ChunkGuide`], which the session's loop node binds to the deploy's
//! guider and step interceptor), and the sampler's Euler step over the model's few-step schedule.
//! An action set with [`ChunkRollout::set_action`] applies to the first chunk not yet committed:
//! a chunk still being denoised under an older action starts over (its few steps are cheap next
//! to the frame period), so the first frames an action affects come one chunk's compute after it
//! arrives, not up to a chunk period later.

use std::sync::Arc;

use anyhow::{Context, Result};
use fastvideo_pipeline::denoise::seeded_noise;
use fastvideo_pipeline::kv_pool::{KvPool, KvSession};
use fastvideo_pipeline::sampler::{FlowMatchEuler, Sampler};
use fastvideo_pipeline::AdapterSet;
use tch::{Device, Kind, Tensor};

use crate::causal::CrossKv;
use crate::tiny_vae::TinyDecodeStream;
use crate::vae::DecodeStream;
use crate::world::{FrameDecoder, WorldModel};

/// A finished chunk: its video frames and what made them.
pub struct Chunk {
    /// Index of the chunk in the session (0 = the first frame).
    pub index: u64,
    /// `[1, 3, n, H, W]` in [-1, 1] (n = 1 for the first chunk, else 4 × chunk frames).
    pub frames: Tensor,
    /// The action index the chunk was generated under.
    pub action: i64,
    /// The id the caller gave that action (0: none yet).
    pub action_id: u64,
}

/// Where a denoise unit is in its chunk's schedule (what guiders and observers see).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DenoiseAt {
    /// 0-based step within the chunk.
    pub step_index: u32,
    /// Denoise steps per chunk.
    pub num_steps: u32,
    /// Model time of this step (0–1000).
    pub timestep: f32,
    /// Noise level now.
    pub sigma: f32,
    /// Noise level after the step.
    pub sigma_next: f32,
}

/// How one denoise step turns the branches' predictions into the velocity the sampler uses.
pub trait ChunkGuide {
    /// May supply the step's output (no forward runs); it must have the latents' shape.
    fn before(&mut self, at: &DenoiseAt, latents: &Tensor) -> Result<Option<Tensor>> {
        let _ = (at, latents);
        Ok(None)
    }
    /// `preds[i]` is branch `i`'s velocity (float32), branch 0 the conditional one.
    fn combine(&mut self, at: &DenoiseAt, preds: &[Tensor]) -> Result<Tensor>;
    /// Sees the output the sampler used.
    fn after(&mut self, at: &DenoiseAt, output: &Tensor) -> Result<()> {
        let _ = (at, output);
        Ok(())
    }
}

/// The model's own sampling: one branch, its prediction as it is.
pub struct Unguided;

impl ChunkGuide for Unguided {
    fn combine(&mut self, _at: &DenoiseAt, preds: &[Tensor]) -> Result<Tensor> {
        Ok(preds[0].shallow_clone())
    }
}

/// What one unit did.
pub enum Unit {
    /// A denoise step: the forwards it ran and the output the sampler used.
    Denoised {
        /// Transformer forwards it ran (one per guidance branch).
        forwards: u32,
        /// The velocity the sampler used.
        output: Tensor,
    },
    /// The commit pass and decode of a finished chunk.
    Committed(Chunk),
}

enum Phase {
    /// Denoising the current chunk: `x` at the sampler's current step.
    Denoise { x: Tensor, sampler: FlowMatchEuler },
    /// The chunk is clean; next unit commits it and decodes it.
    Commit { x0: Tensor },
    /// Only while a unit runs (the phase is moved out of the rollout).
    Running,
}

/// A session's decoder state, carried from chunk to chunk.
enum ChunkDecode {
    Vae(DecodeStream),
    Tiny(TinyDecodeStream),
}

/// One session's rollout state.
pub struct ChunkRollout {
    kv: KvSession,
    /// Text conditioning of each guidance branch (the conditional one first), and the prompt
    /// embeddings it was made from (adapters remake it).
    cross: Vec<CrossKv>,
    contexts: Vec<Tensor>,
    decode: ChunkDecode,
    sigmas: Vec<f64>,
    latent_shape: [i64; 5],
    seed: u64,
    device: Device,
    chunk: u64,
    phase: Phase,
    /// The current chunk's action (index, caller's id) and the one the next chunk takes.
    current: (i64, u64),
    /// The current action's embedding `[1, 1, dim]`, made once per chunk, not per unit.
    cond: Tensor,
    next: (i64, u64),
    /// Whether the current chunk was already restarted for an action.
    restarted: bool,
}

impl ChunkRollout {
    /// Opens a session: reserves its window in `pool`, encodes the prompt, starts chunk 0.
    pub fn new(model: &WorldModel, pool: &Arc<KvPool>, prompt: &str, seed: u64, device: Device) -> Result<Self> {
        Self::with_window(model, pool, &[prompt], model.spec.window, seed, device)
    }

    /// [`new`](Self::new) with one text per guidance branch (the conditional one first) and a
    /// window of `window` latent frames instead of the model's (at most the model's: the pool is
    /// sized for that; fewer frames of context than it was trained with).
    pub fn with_window(
        model: &WorldModel,
        pool: &Arc<KvPool>,
        prompts: &[&str],
        window: usize,
        seed: u64,
        device: Device,
    ) -> Result<Self> {
        let spec = &model.spec;
        anyhow::ensure!(
            window > spec.chunk_frames && window <= spec.window,
            "window: {window} latent frames; this model takes {} to {}",
            spec.chunk_frames + 1,
            spec.window
        );
        anyhow::ensure!(!prompts.is_empty(), "a rollout needs the text of at least one branch");
        let kv = pool.open(window, spec.sink.min(window - 1))?;
        let mut cross = Vec::with_capacity(prompts.len());
        let mut contexts = Vec::with_capacity(prompts.len());
        for p in prompts {
            let context = crate::pipeline::embed_prompt(&model.wan, p, device).context("encoding the prompt")?;
            cross.push(model.wan.transformer.cross_kv(&context));
            contexts.push(context);
        }
        let sf = model.wan.vae.cfg.spatial_factor();
        let latent_shape =
            [1, model.wan.vae.cfg.z_dim, spec.chunk_frames as i64, spec.height as i64 / sf, spec.width as i64 / sf];
        let none = model.actions.index("none").unwrap_or(0);
        let mut r = Self {
            kv,
            cross,
            contexts,
            decode: match model.decoder {
                FrameDecoder::Vae => ChunkDecode::Vae(DecodeStream::default()),
                FrameDecoder::Tiny => ChunkDecode::Tiny(TinyDecodeStream::default()),
            },
            sigmas: spec.sigmas(),
            latent_shape,
            seed,
            device,
            chunk: 0,
            phase: Phase::Running,
            cond: model.actions.embed(&Tensor::from_slice(&[none]).view([1, 1])),
            current: (none, 0),
            next: (none, 0),
            restarted: false,
        };
        r.phase = r.start_chunk();
        Ok(r)
    }

    /// Opens a session that starts from a given first frame (`[1, 3, 1, H, W]` in [-1, 1], the
    /// world model's size) instead of generating one: it is encoded and committed as chunk 0.
    pub fn from_frame(
        model: &WorldModel,
        pool: &Arc<KvPool>,
        prompts: &[&str],
        frame: &Tensor,
        window: usize,
        seed: u64,
        device: Device,
    ) -> Result<Self> {
        let spec = &model.spec;
        let want = [1, 3, 1, spec.height as i64, spec.width as i64];
        anyhow::ensure!(frame.size() == want, "initial frame: shape {:?}, this model takes {want:?}", frame.size());
        let mut r = Self::with_window(model, pool, prompts, window, seed, device)?;
        let vae = &model.wan.vae;
        let z = vae.normalize(&vae.encode(&frame.to_device(device))?);
        r.phase = Phase::Commit { x0: z };
        Ok(r)
    }

    /// Runs the session with LoRA `adapters` (unmerged, on every chunk from the first). Call
    /// before the first unit.
    pub fn set_adapters(&mut self, model: &WorldModel, adapters: Option<Arc<AdapterSet>>) -> Result<()> {
        anyhow::ensure!(self.chunk == 0, "adapters are set before a session's first chunk");
        let t = &model.wan.transformer;
        self.cross = self.contexts.iter().map(|c| t.cross_kv_adapted(c, adapters.clone())).collect();
        Ok(())
    }

    fn start_chunk(&mut self) -> Phase {
        let noise =
            seeded_noise(&self.latent_shape, self.seed.wrapping_add(self.chunk.wrapping_mul(0x9e37_79b9)), self.device);
        Phase::Denoise { x: noise, sampler: FlowMatchEuler::with_sigmas(&self.sigmas) }
    }

    /// The action from the first chunk not yet committed (`id` is echoed in [`Chunk`]). The first
    /// chunk of a session (the first frame) is never restarted, and a chunk at most once, so a
    /// stream of actions cannot keep a session from finishing chunks.
    pub fn set_action(&mut self, action: i64, id: u64) {
        self.next = (action, id);
        if self.chunk > 0 && !self.restarted && !self.at_chunk_start() && self.current.0 != action {
            self.phase = self.start_chunk();
            self.restarted = true;
        }
    }

    /// Chunks finished so far.
    pub fn chunks_done(&self) -> u64 {
        self.chunk
    }

    /// Whether the next unit starts a new chunk (a later action takes effect there).
    pub fn at_chunk_start(&self) -> bool {
        matches!(&self.phase, Phase::Denoise { sampler, .. } if sampler.step_index() == 0)
    }

    /// Where the next unit is in its chunk's schedule, when it is a denoise step.
    pub fn denoise_at(&self) -> Option<DenoiseAt> {
        let Phase::Denoise { sampler, .. } = &self.phase else { return None };
        let i = sampler.step_index();
        Some(DenoiseAt {
            step_index: i as u32,
            num_steps: sampler.timesteps().len() as u32,
            timestep: sampler.timesteps()[i],
            sigma: sampler.sigmas()[i],
            sigma_next: sampler.sigmas()[i + 1],
        })
    }

    /// Runs one unit without guidance; returns the chunk when this unit finished one.
    pub fn step(&mut self, model: &WorldModel) -> Result<Option<Chunk>> {
        Ok(match self.step_guided(model, &mut Unguided)? {
            Unit::Committed(c) => Some(c),
            Unit::Denoised { .. } => None,
        })
    }

    /// Runs one unit; a denoise step runs a forward per text branch and asks `guide` for the
    /// velocity the sampler takes.
    pub fn step_guided(&mut self, model: &WorldModel, guide: &mut dyn ChunkGuide) -> Result<Unit> {
        let tr = &model.wan.transformer;
        if self.at_chunk_start() && self.current.0 != self.next.0 {
            // One action for the whole chunk: `[1, 1, dim]` broadcasts over its frames.
            self.cond = model.actions.embed(&Tensor::from_slice(&[self.next.0]).view([1, 1]));
        }
        if self.at_chunk_start() {
            self.current = self.next;
        }
        let at = self.denoise_at();
        let cond = &self.cond.shallow_clone();
        match std::mem::replace(&mut self.phase, Phase::Running) {
            Phase::Denoise { x, mut sampler } => {
                let at = at.expect("a denoise phase has a step");
                let (output, forwards) = match guide.before(&at, &x)? {
                    Some(out) => {
                        anyhow::ensure!(
                            out.size() == x.size(),
                            "step interceptor supplied an output of shape {:?}; the latents have {:?}",
                            out.size(),
                            x.size()
                        );
                        (out, 0)
                    }
                    None => {
                        let t = Tensor::from_slice(&[at.timestep]).to_device(self.device);
                        let mut preds = Vec::with_capacity(self.cross.len());
                        for cross in &self.cross {
                            let v = tr.forward_chunk(&x, &t, Some(cond), cross, &mut self.kv, false)?;
                            preds.push(v.to_kind(Kind::Float));
                        }
                        (guide.combine(&at, &preds)?, preds.len() as u32)
                    }
                };
                let x = sampler.step(&output, &x)?;
                guide.after(&at, &output)?;
                self.phase = if sampler.step_index() == sampler.timesteps().len() {
                    Phase::Commit { x0: x }
                } else {
                    Phase::Denoise { x, sampler }
                };
                Ok(Unit::Denoised { forwards, output })
            }
            Phase::Commit { x0 } => {
                let t = Tensor::zeros([1], (Kind::Float, self.device));
                let _ = tr.forward_chunk(&x0, &t, Some(cond), &self.cross[0], &mut self.kv, true)?;
                let vae = &model.wan.vae;
                let z = vae.denormalize(&x0);
                let frames = match &mut self.decode {
                    ChunkDecode::Vae(stream) => {
                        let frames = (0..z.size()[2])
                            .map(|i| vae.decode_next(stream, &z.narrow(2, i, 1)))
                            .collect::<Result<Vec<_>>>()?;
                        Tensor::cat(&frames, 2)
                    }
                    ChunkDecode::Tiny(stream) => {
                        let tiny = model.wan.tiny_vae.as_ref().context("the world model has no tiny decoder")?;
                        tiny.decode_next(stream, &z)?
                    }
                };
                let chunk = Chunk { index: self.chunk, frames, action: self.current.0, action_id: self.current.1 };
                self.chunk += 1;
                self.restarted = false;
                self.phase = self.start_chunk();
                Ok(Unit::Committed(chunk))
            }
            Phase::Running => anyhow::bail!("rollout: a unit ran while another was running"),
        }
    }

    /// Runs units until the next chunk is finished.
    pub fn next_chunk(&mut self, model: &WorldModel) -> Result<Chunk> {
        loop {
            if let Some(c) = self.step(model)? {
                return Ok(c);
            }
        }
    }
}

/// A pool with room for exactly one session of `model` (offline rollouts, evaluation).
pub fn single_session_pool(model: &WorldModel, device: Device) -> Arc<KvPool> {
    let spec = &model.spec;
    let sf = model.wan.vae.cfg.spatial_factor();
    let mut cfg =
        crate::causal::pool_config(&model.wan.transformer, spec.height as i64 / sf, spec.width as i64 / sf, device, 0);
    cfg.budget_bytes = cfg.slab_bytes() * (spec.window * cfg.layers) as u64;
    KvPool::new(cfg)
}

/// The bare rollout, outside the loop contract: the first chunk (generated, or `first_frame`
/// encoded) and then one chunk per action (names as the model lists them), calling `on_chunk`
/// as each is decoded; returns all frames `[1, 3, F, H, W]`. What the family's tests compare
/// the session pipeline against; commands roll out through the session pipeline instead.
#[allow(clippy::too_many_arguments)]
pub fn run_offline(
    model: &WorldModel,
    actions: &[String],
    prompt: &str,
    first_frame: Option<&Tensor>,
    seed: u64,
    device: Device,
    adapters: Option<Arc<AdapterSet>>,
    mut on_chunk: impl FnMut(&Chunk),
) -> Result<Tensor> {
    let ids = actions.iter().map(|a| model.actions.index(a)).collect::<Result<Vec<_>>>()?;
    let pool = single_session_pool(model, device);
    let mut r = match first_frame {
        Some(f) => ChunkRollout::from_frame(model, &pool, &[prompt], f, model.spec.window, seed, device)?,
        None => ChunkRollout::new(model, &pool, prompt, seed, device)?,
    };
    r.set_adapters(model, adapters)?;
    let mut frames = Vec::with_capacity(ids.len() + 1);
    let first = r.next_chunk(model)?;
    on_chunk(&first);
    frames.push(first.frames);
    for (i, &a) in ids.iter().enumerate() {
        r.set_action(a, i as u64 + 1);
        let c = r.next_chunk(model)?;
        on_chunk(&c);
        frames.push(c.frames);
    }
    Ok(Tensor::cat(&frames, 2))
}
