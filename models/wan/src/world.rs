//! An interactive world model: a Wan folder whose transformer runs causally (see
//! [`causal`](crate::causal)), plus an `action_embedder/` component and a `world.json` of rollout
//! settings.
//!
//! `action_embedder/config.json` names the actions (`"actions": ["none", "up", ...]`) and the
//! width; its safetensors hold `embedding.weight [actions, dim]` and `proj.weight [dim, dim]`,
//! `proj.bias [dim]`. A latent frame's action embedding, `proj(embedding[a])`, is added to the
//! timestep embedding of that frame before the blocks' modulation is projected from it, so an
//! action steers every block the way the timestep does.

use std::path::Path;

use anyhow::{bail, Context, Result};
use fastvideo_layers::config::read_config_with;
use fastvideo_layers::Linear;
use serde::Deserialize;
use tch::{Device, Kind, Tensor};

use crate::loader::{LoadOptions, WanModel};
use crate::weights::Weights;

/// `action_embedder/config.json`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionConfig {
    /// The action names, in the order the embedding's rows are.
    pub actions: Vec<String>,
    /// Width of the action embedding.
    pub dim: i64,
}

/// Actions → per-frame conditioning.
pub struct ActionEmbedder {
    /// Its config.
    pub cfg: ActionConfig,
    embedding: Tensor,
    proj: Linear,
}

// SAFETY: the tensors are written once in `load` and only read afterwards; libtorch allows
// concurrent reads of a tensor from several threads.
unsafe impl Sync for ActionEmbedder {}

impl ActionEmbedder {
    /// Reads `action_embedder/` (`config.json` and its weights) onto `device` in `kind`.
    pub fn load(dir: &Path, device: Device, kind: Kind) -> Result<Self> {
        let cfg: ActionConfig = read_config_with(&dir.join("config.json"), &[])?;
        if cfg.actions.is_empty() {
            bail!("{}: `actions` is empty", dir.join("config.json").display());
        }
        let w = Weights::from_dir(dir, "diffusion_pytorch_model", device, kind)?;
        let n = cfg.actions.len() as i64;
        Ok(Self {
            embedding: w.get("embedding.weight", &[n, cfg.dim])?,
            proj: Linear::new(&w.pp("proj"), cfg.dim, cfg.dim, true)?,
            cfg,
        })
    }

    /// The index of an action name; the error lists the known ones.
    pub fn index(&self, name: &str) -> Result<i64> {
        match self.cfg.actions.iter().position(|a| a == name) {
            Some(i) => Ok(i as i64),
            None => bail!("unknown action `{name}`; this model knows {}", self.cfg.actions.join(", ")),
        }
    }

    /// `ids [B, F]` (int64) → `[B, F, dim]`.
    pub fn embed(&self, ids: &Tensor) -> Tensor {
        self.proj.forward(
            &self.embedding.index_select(0, &ids.reshape([-1]).to_device(self.embedding.device())).view([
                ids.size()[0],
                ids.size()[1],
                self.cfg.dim,
            ]),
        )
    }
}

/// `world.json`: how the model was trained to roll out.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorldSpec {
    /// Free text about the model, shown to users.
    pub description: String,
    /// Latent frames generated per chunk.
    pub chunk_frames: usize,
    /// Denoising timesteps of each chunk (0–1000, descending), before the shift.
    pub timesteps: Vec<f64>,
    /// The flow shift applied to `timesteps`.
    pub shift: f64,
    /// Latent frames a chunk attends to, itself included.
    pub window: usize,
    /// First latent frames that always stay in the window.
    pub sink: usize,
    /// Frames per second the video plays at.
    pub fps: u32,
    /// Frame height in pixels.
    pub height: u32,
    /// Frame width in pixels.
    pub width: u32,
    /// The prompt it was trained with, used when a session gives none.
    pub prompt: String,
}

impl Default for WorldSpec {
    fn default() -> Self {
        Self {
            description: String::new(),
            chunk_frames: 1,
            timesteps: vec![1000.0, 750.0, 500.0, 250.0],
            shift: 5.0,
            window: 6,
            sink: 1,
            fps: 16,
            height: 64,
            width: 64,
            prompt: String::new(),
        }
    }
}

impl WorldSpec {
    /// The flow-matching sigmas of one chunk's denoise, shifted as the sampler does
    /// (`s·σ / (1 + (s-1)·σ)`), ending at 0.
    pub fn sigmas(&self) -> Vec<f64> {
        let mut out: Vec<f64> = self
            .timesteps
            .iter()
            .map(|t| {
                let s = t / 1000.0;
                self.shift * s / (1.0 + (self.shift - 1.0) * s)
            })
            .collect();
        out.push(0.0);
        out
    }
}

/// A world model folder, loaded.
pub struct WorldModel {
    /// The video model underneath.
    pub wan: WanModel,
    /// The action embedder.
    pub actions: ActionEmbedder,
    /// How it was trained to roll out (`world.json`).
    pub spec: WorldSpec,
    /// What turns a session's chunks into frames.
    pub decoder: FrameDecoder,
}

/// The decoder of a world session's chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FrameDecoder {
    /// The model's VAE (exact).
    #[default]
    Vae,
    /// The folder's `tiny_vae/`: a fraction of the VAE's cost, approximately the same frames
    /// (opt-in: `tiny_decoder`).
    Tiny,
}

impl WorldModel {
    /// Loads a world-model folder: a Wan folder with `action_embedder/` and `world.json`.
    pub fn load(dir: &Path, opts: LoadOptions) -> Result<Self> {
        let wan = WanModel::load_with(dir, opts.clone())?;
        let a_dir = dir.join("action_embedder");
        if !a_dir.is_dir() {
            bail!("{} is not a world model: it has no action_embedder/ folder", dir.display());
        }
        let actions = ActionEmbedder::load(&a_dir, opts.device, wan.load_report.transformer_dtype)
            .with_context(|| format!("loading {}", a_dir.display()))?;
        let spec: WorldSpec = read_config_with(&dir.join("world.json"), &[])?;
        if spec.chunk_frames == 0 || spec.window <= spec.chunk_frames || spec.sink >= spec.window {
            bail!(
                "{}: chunk_frames {} / window {} / sink {} must satisfy 0 < chunk_frames < window and sink < window",
                dir.join("world.json").display(),
                spec.chunk_frames,
                spec.window,
                spec.sink
            );
        }
        if actions.cfg.dim != wan.transformer.cfg.inner_dim() {
            bail!(
                "{}: action dim {} does not match the transformer's width {}",
                a_dir.display(),
                actions.cfg.dim,
                wan.transformer.cfg.inner_dim()
            );
        }
        Ok(Self { wan, actions, spec, decoder: FrameDecoder::Vae })
    }

    /// Sessions decode with the folder's `tiny_vae/` instead of the VAE; an error naming the
    /// folder when it has none.
    pub fn with_tiny_decoder(mut self) -> Result<Self> {
        if self.wan.tiny_vae.is_none() {
            bail!("{}: no tiny_vae/ folder, so sessions cannot use the tiny decoder", self.wan.dir.display());
        }
        self.decoder = FrameDecoder::Tiny;
        Ok(self)
    }
}
