//! The chunk rollout of a world model (DESIGN §3 `ChunkRollout`): an outer loop over chunks of
//! latent frames holding a key/value session, an inner few-step denoise per chunk, the pass over
//! the clean chunk that commits its keys and values, and the incremental VAE decode that turns
//! each finished chunk into video frames at once.
//!
//! The runtime drives it one unit at a time ([`ChunkRollout::step`]): one denoise step, or one
//! commit pass plus its decode. So a scheduler can interleave sessions with other work at the
//! same boundaries as denoise steps. An action set with [`ChunkRollout::set_action`] applies to the
//! first chunk not yet committed: a chunk still being denoised under an older action starts over
//! (its few steps are cheap next to the frame period), so the first frames an action affects come
//! one chunk's compute after it arrives, not up to a chunk period later.

use std::sync::Arc;

use anyhow::{Context, Result};
use fastvideo_pipeline::denoise::seeded_noise;
use fastvideo_pipeline::kv_pool::{KvPool, KvSession};
use tch::{Device, Kind, Tensor};

use crate::causal::CrossKv;
use crate::vae::DecodeStream;
use crate::world::WorldModel;

/// A finished chunk: its video frames and what made them.
pub struct Chunk {
    /// Index of the chunk in the session (0 = the first frame).
    pub index: u64,
    /// `[1, 3, n, H, W]` in [-1, 1] (n = 1 for the first chunk, else 4 × chunk frames).
    pub frames: Tensor,
    /// The action index the chunk was generated under, and the id the caller gave it.
    pub action: i64,
    pub action_id: u64,
}

enum Phase {
    /// Denoising the current chunk: `x` at `sigmas[step]`.
    Denoise { step: usize, x: Tensor },
    /// The chunk is clean; next unit commits it and decodes it.
    Commit { x0: Tensor },
    /// Only while a unit runs (the phase is moved out of the rollout).
    Running,
}

/// One session's rollout state.
pub struct ChunkRollout {
    kv: KvSession,
    cross: CrossKv,
    decode: DecodeStream,
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
        Self::with_window(model, pool, prompt, model.spec.window, seed, device)
    }

    /// [`new`](Self::new) with a window of `window` latent frames instead of the model's (at most
    /// the model's: the pool is sized for that; fewer frames of context than it was trained with).
    pub fn with_window(
        model: &WorldModel,
        pool: &Arc<KvPool>,
        prompt: &str,
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
        let kv = pool.open(window, spec.sink.min(window - 1))?;
        let context = crate::pipeline::embed_prompt(&model.wan, prompt, device).context("encoding the prompt")?;
        let cross = model.wan.transformer.cross_kv(&context);
        let sf = model.wan.vae.cfg.spatial_factor();
        let latent_shape =
            [1, model.wan.vae.cfg.z_dim, spec.chunk_frames as i64, spec.height as i64 / sf, spec.width as i64 / sf];
        let none = model.actions.index("none").unwrap_or(0);
        let mut r = Self {
            kv,
            cross,
            decode: DecodeStream::default(),
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
        prompt: &str,
        frame: &Tensor,
        window: usize,
        seed: u64,
        device: Device,
    ) -> Result<Self> {
        let spec = &model.spec;
        let want = [1, 3, 1, spec.height as i64, spec.width as i64];
        anyhow::ensure!(frame.size() == want, "initial frame: shape {:?}, this model takes {want:?}", frame.size());
        let mut r = Self::with_window(model, pool, prompt, window, seed, device)?;
        let vae = &model.wan.vae;
        let z = vae.normalize(&vae.encode(&frame.to_device(device))?);
        r.phase = Phase::Commit { x0: z };
        Ok(r)
    }

    fn start_chunk(&mut self) -> Phase {
        let noise =
            seeded_noise(&self.latent_shape, self.seed.wrapping_add(self.chunk.wrapping_mul(0x9e37_79b9)), self.device);
        Phase::Denoise { step: 0, x: noise }
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
        matches!(self.phase, Phase::Denoise { step: 0, .. })
    }

    /// Runs one unit; returns the chunk when this unit finished one.
    pub fn step(&mut self, model: &WorldModel) -> Result<Option<Chunk>> {
        let tr = &model.wan.transformer;
        if self.at_chunk_start() && self.current.0 != self.next.0 {
            // One action for the whole chunk: `[1, 1, dim]` broadcasts over its frames.
            self.cond = model.actions.embed(&Tensor::from_slice(&[self.next.0]).view([1, 1]));
        }
        if self.at_chunk_start() {
            self.current = self.next;
        }
        let cond = &self.cond.shallow_clone();
        match std::mem::replace(&mut self.phase, Phase::Running) {
            Phase::Denoise { step, x } => {
                let (sigma, next) = (self.sigmas[step], self.sigmas[step + 1]);
                let t = Tensor::from_slice(&[(sigma * 1000.0) as f32]).to_device(self.device);
                let v = tr.forward_chunk(&x, &t, Some(cond), &self.cross, &mut self.kv, false)?;
                let x = &x + v.to_kind(Kind::Float) * (next - sigma);
                self.phase = if step + 2 == self.sigmas.len() {
                    Phase::Commit { x0: x }
                } else {
                    Phase::Denoise { step: step + 1, x }
                };
                Ok(None)
            }
            Phase::Commit { x0 } => {
                let t = Tensor::zeros([1], (Kind::Float, self.device));
                let _ = tr.forward_chunk(&x0, &t, Some(cond), &self.cross, &mut self.kv, true)?;
                let vae = &model.wan.vae;
                let z = vae.denormalize(&x0);
                let frames = (0..z.size()[2])
                    .map(|i| vae.decode_next(&mut self.decode, &z.narrow(2, i, 1)))
                    .collect::<Result<Vec<_>>>()?;
                let chunk = Chunk {
                    index: self.chunk,
                    frames: Tensor::cat(&frames, 2),
                    action: self.current.0,
                    action_id: self.current.1,
                };
                self.chunk += 1;
                self.restarted = false;
                self.phase = self.start_chunk();
                Ok(Some(chunk))
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

/// Rolls out the first chunk (generated, or `first_frame` encoded) and then one chunk per
/// action (names as the model lists them), calling `on_chunk` as each is decoded; returns all
/// frames `[1, 3, F, H, W]`.
#[allow(clippy::too_many_arguments)]
pub fn run_offline(
    model: &WorldModel,
    actions: &[String],
    prompt: &str,
    first_frame: Option<&Tensor>,
    seed: u64,
    device: Device,
    mut on_chunk: impl FnMut(&Chunk),
) -> Result<Tensor> {
    let ids = actions.iter().map(|a| model.actions.index(a)).collect::<Result<Vec<_>>>()?;
    let pool = single_session_pool(model, device);
    let mut r = match first_frame {
        Some(f) => ChunkRollout::from_frame(model, &pool, prompt, f, model.spec.window, seed, device)?,
        None => ChunkRollout::new(model, &pool, prompt, seed, device)?,
    };
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

/// Parses `"right*8,up*8,none"` into action names, one per chunk (the first chunk — the lone
/// first frame — takes none and is not listed). Errors name the bad item.
pub fn parse_actions(spec: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, count) = match item.split_once('*') {
            Some((n, c)) => (
                n.trim(),
                c.trim().parse::<usize>().ok().filter(|&c| c > 0).with_context(|| {
                    format!("--actions: `{item}`: the count after `*` must be a positive whole number")
                })?,
            ),
            None => (item, 1),
        };
        out.extend(std::iter::repeat_n(name.to_string(), count));
    }
    anyhow::ensure!(!out.is_empty(), "--actions: no actions given (e.g. \"right*8,up*8\")");
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::parse_actions;

    #[test]
    fn action_lists_expand_counts_and_name_bad_items() {
        assert_eq!(parse_actions("right*2, up,none*1").unwrap(), ["right", "right", "up", "none"]);
        assert!(parse_actions("up*x").unwrap_err().to_string().contains("`up*x`"));
        assert!(parse_actions("up*0").is_err());
        assert!(parse_actions(" , ").is_err());
    }
}
