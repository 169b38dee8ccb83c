//! Causal Wan (as in CausVid, Self-Forcing and Matrix-Game 2.0): the same
//! `WanTransformer3DModel` weights run block-causally — each chunk of latent frames attends to
//! itself and to earlier frames only — so a rollout can produce a few frames at a time against a
//! cache of the earlier frames' keys and values instead of recomputing them.
//!
//! Keys are cached after their RMS norm and rotary embedding at the frame's absolute position, so
//! when the window rolls (old frames evicted, sink frames kept) every cached key keeps the
//! position it was computed at and attention still sees true relative offsets. The text's
//! cross-attention keys and values are computed once per session ([`CrossKv`]).
//!
//! [`WanTransformer3DModel::forward_block_causal`] is the reference the rollout is tested
//! against: the whole sequence in one forward with a block-causal (optionally windowed) mask.

use std::sync::Arc;

use anyhow::{ensure, Result};
use fastvideo_pipeline::kv_pool::{KvError, KvSession};
use fastvideo_pipeline::{AdapterRows, AdapterSet};
use tch::{Device, Tensor};

use crate::transformer::{per_token, Call, Cross, Keys, Rope, WanTransformer3DModel};

/// Where a chunk's self-attention keys and values come from and go to.
pub trait FrameKv {
    /// Absolute index of the next frame to commit (the chunk's first frame).
    fn next_frame(&self) -> u64;
    /// Keys and values a chunk of `chunk` frames attends to at `layer` (`[1, M, dim]` each,
    /// frame order), `None` when nothing was committed.
    fn past(&self, layer: usize, chunk: usize, tokens_per_frame: i64) -> Result<Option<(Tensor, Tensor)>, KvError>;
    /// Stores `frames` new frames' keys and values, per layer.
    fn commit(&mut self, kv: &[(Tensor, Tensor)], frames: usize) -> Result<(), KvError>;
}

impl FrameKv for KvSession {
    fn next_frame(&self) -> u64 {
        self.committed_frames()
    }
    fn past(&self, layer: usize, chunk: usize, tokens_per_frame: i64) -> Result<Option<(Tensor, Tensor)>, KvError> {
        KvSession::past(self, layer, chunk, tokens_per_frame)
    }
    fn commit(&mut self, kv: &[(Tensor, Tensor)], frames: usize) -> Result<(), KvError> {
        KvSession::commit(self, kv, frames).map(|_| ())
    }
}

/// A session's text conditioning: per block, the cross-attention's keys and values; and the LoRA
/// adapters the session runs with, which made them and apply to every chunk.
pub struct CrossKv {
    layers: Vec<(Tensor, Tensor)>,
    adapters: Option<Arc<AdapterSet>>,
}

/// Which earlier frames a chunk may see: all of them, or a window of `window` frames (the chunk
/// included) of which the first `sink` frames of the sequence are always part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visibility {
    /// Every earlier frame.
    All,
    /// A sliding window with an attention sink.
    Window {
        /// Latent frames seen, the chunk's own included.
        window: usize,
        /// First frames of the sequence that always stay in the window.
        sink: usize,
    },
}

impl Visibility {
    /// Whether a query in a chunk starting at frame `start` (of `chunk` frames) sees key frame
    /// `key`. The same rule as the pool's `visible`.
    fn sees(&self, start: usize, chunk: usize, key: usize) -> bool {
        if key >= start {
            return key < start + chunk;
        }
        match *self {
            Visibility::All => true,
            Visibility::Window { window, sink } => {
                let room = window.saturating_sub(chunk);
                if start <= room {
                    return true;
                }
                let sinks = sink.min(room);
                key < sinks || key >= start - (room - sinks)
            }
        }
    }
}

impl WanTransformer3DModel {
    /// The text's keys and values for every block (`context [1, L, text_dim]`).
    pub fn cross_kv(&self, context: &Tensor) -> CrossKv {
        self.cross_kv_adapted(context, None)
    }

    /// [`cross_kv`](Self::cross_kv) for a session running with `adapters`.
    pub fn cross_kv_adapted(&self, context: &Tensor, adapters: Option<Arc<AdapterSet>>) -> CrossKv {
        let rows = AdapterRows::every(adapters.as_deref());
        let c = self.text_context_lora(context, rows.as_ref());
        let layers = self.blocks.iter().map(|b| b.context_kv_lora(&c, rows.as_ref())).collect();
        CrossKv { layers, adapters }
    }

    /// One chunk of a rollout: `latents [1, C, F, H, W]` (frames `kv.next_frame()..`), one
    /// `timestep [1]` for the chunk, optional per-frame conditioning `frame_cond [1, F, dim]`
    /// (an action embedding) added to the timestep embedding. Attends to what `kv` holds; with
    /// `commit` (the pass over the clean chunk at t = 0) the chunk's keys and values are stored
    /// for the chunks after it.
    pub fn forward_chunk(
        &self,
        latents: &Tensor,
        timestep: &Tensor,
        frame_cond: Option<&Tensor>,
        cross: &CrossKv,
        kv: &mut dyn FrameKv,
        commit: bool,
    ) -> Result<Tensor> {
        let [b, f, h, w] = self.grid(latents);
        ensure!(b == 1, "causal chunk: batch {b}, sessions run one at a time");
        ensure!(timestep.size() == [1], "causal chunk: timestep {:?} must be [1]", timestep.size());
        ensure!(cross.layers.len() == self.blocks.len(), "causal chunk: cross-attention cache of another model");
        let start = kv.next_frame() as i64;
        let rope = self.rope_at(f, h, w, start, latents.device());
        let tokens = h * w;
        let rows = AdapterRows::every(cross.adapters.as_deref());
        let lora = rows.as_ref();
        let (temb, temb6) = per_token(self.time_embedding_lora(timestep, frame_cond, lora), tokens);
        let mut x = self.patchify(latents);
        let mut fresh = Vec::with_capacity(if commit { self.blocks.len() } else { 0 });
        for (l, block) in self.blocks.iter().enumerate() {
            let past = kv.past(l, f as usize, tokens)?;
            let (ck, cv) = &cross.layers[l];
            let keys = Keys::Local { past: past.as_ref().map(|(k, v)| (k, v)), mask: None };
            let call = Call { context: Cross::Kv(ck, cv), temb6: &temb6, rope: &rope, keys, keep_kv: commit, lora };
            let (out, own) = block.run(&x, call)?;
            x = out;
            fresh.extend(own);
        }
        if commit {
            kv.commit(&fresh, f as usize)?;
        }
        Ok(self.head_lora(&x, &temb, latents, lora))
    }

    /// The reference: all frames of `latents [B, C, F, H, W]` in one forward, chunk `i` (of
    /// `chunk` frames) attending to itself and the earlier frames `visibility` allows, frame
    /// `j` at `frame_timesteps[:, j]` (`[B, F]`).
    pub fn forward_block_causal(
        &self,
        latents: &Tensor,
        frame_timesteps: &Tensor,
        frame_cond: Option<&Tensor>,
        context: &Tensor,
        chunk: usize,
        visibility: Visibility,
    ) -> Result<Tensor> {
        let [b, f, h, w] = self.grid(latents);
        ensure!(
            frame_timesteps.size() == [b, f],
            "block-causal: timesteps {:?} must be [{b}, {f}]",
            frame_timesteps.size()
        );
        ensure!(
            chunk > 0 && (f as usize).is_multiple_of(chunk),
            "block-causal: {f} frames are not whole chunks of {chunk}"
        );
        let tokens = h * w;
        let rope = Rope::at(self.cfg.attention_head_dim, [f, h, w], 0, latents.device());
        let (temb, temb6) = per_token(self.time_embedding_with(frame_timesteps, frame_cond), tokens);
        let frames: Vec<bool> = (0..f as usize)
            .flat_map(|q| (0..f as usize).map(move |k| (q, k)))
            .map(|(q, k)| visibility.sees(q / chunk * chunk, chunk, k))
            .collect();
        let mask = Tensor::from_slice(&frames)
            .view([f, f])
            .repeat_interleave_self_int(tokens, 0, None)
            .repeat_interleave_self_int(tokens, 1, None)
            .to_device(latents.device());
        let context = self.text_context(context);
        let mut x = self.patchify(latents);
        for block in &self.blocks {
            let keys = Keys::Local { past: None, mask: Some(&mask) };
            x = block.forward_with(&x, Cross::Text(&context), &temb6, &rope, keys, false)?.0;
        }
        Ok(self.head(&x, &temb, latents))
    }
}

/// Keys and values kept in plain tensors, every frame visible: for tests and single-use rollouts
/// that need no pool.
#[derive(Default)]
pub struct UnboundedKv {
    layers: Vec<(Tensor, Tensor)>,
    frames: u64,
}

impl FrameKv for UnboundedKv {
    fn next_frame(&self) -> u64 {
        self.frames
    }
    fn past(&self, layer: usize, _chunk: usize, _tokens: i64) -> Result<Option<(Tensor, Tensor)>, KvError> {
        Ok(self.layers.get(layer).map(|(k, v)| (k.shallow_clone(), v.shallow_clone())))
    }
    fn commit(&mut self, kv: &[(Tensor, Tensor)], frames: usize) -> Result<(), KvError> {
        if self.layers.is_empty() {
            self.layers = kv.iter().map(|(k, v)| (k.shallow_clone(), v.shallow_clone())).collect();
        } else {
            for (held, (k, v)) in self.layers.iter_mut().zip(kv) {
                *held = (Tensor::cat(&[&held.0, k], 1), Tensor::cat(&[&held.1, v], 1));
            }
        }
        self.frames += frames as u64;
        Ok(())
    }
}

/// Tokens per latent frame and the width of one slab row, for sizing a pool for this model.
pub fn kv_shape(model: &WanTransformer3DModel, latent_height: i64, latent_width: i64) -> (usize, i64, i64) {
    let [_, ph, pw] = model.cfg.patch_size;
    (model.blocks.len(), (latent_height / ph) * (latent_width / pw), model.cfg.inner_dim())
}

/// A pool config for `model` at one latent size.
pub fn pool_config(
    model: &WanTransformer3DModel,
    latent_height: i64,
    latent_width: i64,
    device: Device,
    budget_bytes: u64,
) -> fastvideo_pipeline::kv_pool::KvPoolConfig {
    let (layers, tokens_per_frame, dim) = kv_shape(model, latent_height, latent_width);
    fastvideo_pipeline::kv_pool::KvPoolConfig {
        layers,
        tokens_per_frame,
        dim,
        kind: model.kind(),
        device,
        budget_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::Visibility;

    #[test]
    fn windowed_visibility_keeps_sinks_and_the_most_recent_frames() {
        let v = Visibility::Window { window: 5, sink: 1 };
        // Chunk of 2 at frame 6: room for 3 earlier frames: the sink (0) and frames 4, 5.
        let seen: Vec<usize> = (0..10).filter(|&k| v.sees(6, 2, k)).collect();
        assert_eq!(seen, [0, 4, 5, 6, 7]);
        // Early chunks see everything before them.
        assert_eq!((0..4).filter(|&k| v.sees(2, 2, k)).count(), 4);
        assert_eq!((0..10).filter(|&k| Visibility::All.sees(6, 2, k)).count(), 8);
    }
}
