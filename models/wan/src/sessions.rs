//! A world model as the engine's session model: each session is a [`ChunkRollout`] against one shared
//! key/value pool, its chunks handed out as RGB video.

use std::sync::Arc;

use fastvideo_pipeline::kv_pool::{KvPool, PoolStats};
use fastvideo_pipeline::session::{SessionChunk, SessionModel, SessionRequest, SessionRun};
use fastvideo_request::{ActionPart, RequestError};
use tch::{Device, Tensor};

use crate::chunk_rollout::ChunkRollout;
use crate::world::WorldModel;

/// Makes a session's first frame from a seed (`[1, 3, 1, H, W]` in [-1, 1]), for models whose
/// world has a simulator (the shipped one); sessions without a start seed generate it.
pub type FirstFrame = Box<dyn Fn(u64) -> anyhow::Result<Tensor> + Send + Sync>;

pub struct WorldSessions {
    id: String,
    model: Arc<WorldModel>,
    pool: Arc<KvPool>,
    device: Device,
    first_frame: Option<FirstFrame>,
}

impl WorldSessions {
    /// Sessions of `model` with a pool sized for `max_sessions` at the model's own size.
    pub fn new(id: String, model: Arc<WorldModel>, max_sessions: usize, device: Device) -> Self {
        let spec = &model.spec;
        let sf = model.wan.vae.cfg.spatial_factor();
        let mut cfg = crate::causal::pool_config(
            &model.wan.transformer,
            spec.height as i64 / sf,
            spec.width as i64 / sf,
            device,
            0,
        );
        cfg.budget_bytes = cfg.slab_bytes() * (spec.window * cfg.layers * max_sessions.max(1)) as u64;
        Self { id, pool: KvPool::new(cfg), model, device, first_frame: None }
    }

    pub fn with_first_frame(mut self, f: FirstFrame) -> Self {
        self.first_frame = Some(f);
        self
    }

    pub fn pool(&self) -> &Arc<KvPool> {
        &self.pool
    }
}

impl SessionModel for WorldSessions {
    fn id(&self) -> &str {
        &self.id
    }
    fn actions(&self) -> Vec<String> {
        self.model.actions.cfg.actions.clone()
    }
    fn fps(&self) -> u32 {
        self.model.spec.fps
    }
    fn frames_per_chunk(&self) -> u32 {
        (self.model.wan.vae.cfg.temporal_factor() as usize * self.model.spec.chunk_frames) as u32
    }
    fn frame_size(&self) -> (u32, u32) {
        (self.model.spec.width, self.model.spec.height)
    }
    fn kv_stats(&self) -> Option<PoolStats> {
        Some(self.pool.stats())
    }

    fn open(&self, req: &SessionRequest) -> Result<Box<dyn SessionRun>, RequestError> {
        let prompt = req.prompt.clone().unwrap_or_else(|| self.model.spec.prompt.clone());
        let spec = &self.model.spec;
        let window = req.window.unwrap_or(spec.window);
        if window <= spec.chunk_frames || window > spec.window {
            return Err(RequestError::new(
                "window",
                format!(
                    "{window} latent frames; this model takes {} to {} (the key/value pool is sized for {})",
                    spec.chunk_frames + 1,
                    spec.window,
                    spec.window
                ),
            ));
        }
        let rollout = match req.start_seed {
            Some(seed) => {
                let f = self.first_frame.as_ref().ok_or_else(|| {
                    RequestError::new("start_seed", "this world model has no simulator to draw a first frame from")
                })?;
                let frame = f(seed).map_err(|e| RequestError::new("start_seed", format!("{e:#}")))?;
                tch::no_grad(|| {
                    ChunkRollout::from_frame(&self.model, &self.pool, &prompt, &frame, window, req.seed, self.device)
                })
            }
            None => tch::no_grad(|| {
                ChunkRollout::with_window(&self.model, &self.pool, &prompt, window, req.seed, self.device)
            }),
        }
        .map_err(|e| RequestError::new("session", format!("{e:#}")))?;
        Ok(Box::new(WorldSessionRun { model: self.model.clone(), rollout, frames: 0, pending: Vec::new() }))
    }
}

struct WorldSessionRun {
    model: Arc<WorldModel>,
    rollout: ChunkRollout,
    /// Video frames finished so far (the next chunk's first frame).
    frames: u64,
    /// Actions waiting for their `from_frame`, as (frame, key index, id).
    pending: Vec<(u64, i64, u64)>,
}

impl SessionRun for WorldSessionRun {
    fn step(&mut self) -> anyhow::Result<Option<SessionChunk>> {
        if self.rollout.at_chunk_start() && !self.pending.is_empty() {
            // The latest action due by this chunk's first frame takes it.
            let frames = self.frames;
            let due: Vec<_> = self.pending.iter().filter(|p| p.0 <= frames).copied().collect();
            self.pending.retain(|p| p.0 > frames);
            if let Some(&(_, key, id)) = due.iter().max_by_key(|p| p.0) {
                self.rollout.set_action(key, id);
            }
        }
        let model = self.model.clone();
        let Some(chunk) = tch::no_grad(|| self.rollout.step(&model))? else { return Ok(None) };
        let video = crate::pipeline::frames_to_video(&chunk.frames, self.model.spec.fps)?;
        let first_frame = self.frames;
        self.frames += video.num_frames as u64;
        Ok(Some(SessionChunk { index: chunk.index, first_frame, video, action_id: chunk.action_id }))
    }

    fn set_action(&mut self, action: &ActionPart) {
        let Some(key) = action.key.as_deref().and_then(|k| self.model.actions.index(k).ok()) else { return };
        let id = action.id.unwrap_or(0);
        match action.from_frame {
            Some(f) if f > self.frames => self.pending.push((f, key, id)),
            _ => self.rollout.set_action(key, id),
        }
    }

    fn units_per_chunk(&self) -> u32 {
        self.model.spec.timesteps.len() as u32 + 1
    }
}
