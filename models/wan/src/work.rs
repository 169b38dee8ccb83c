//! The model's unit of work for the engine's cost model: the transformer's tokens, the sequence
//! each forward runs (latent frames over the temporal patch, times latent rows and columns over
//! the spatial patch). Sizes that make as many tokens cost the same, so they share a cost key.

use std::sync::Arc;

use fastvideo_pipeline::WorkCount;
use fastvideo_request::ResolvedRequest;

use crate::world::WorldModel;
use crate::WanModel;

/// How frames and pixels become tokens: the VAE's strides and the transformer's patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenGeometry {
    /// Frames per latent frame after the first (the VAE's temporal stride).
    pub temporal_stride: u64,
    /// Pixels per latent along height and width (the VAE's stride, its own patches included).
    pub spatial_stride: u64,
    /// The transformer's patch in latents, `[frames, height, width]`.
    pub patch: [u64; 3],
}

impl TokenGeometry {
    /// The geometry of `model`'s VAE and transformer.
    pub fn of(model: &WanModel) -> Self {
        let p = model.transformer.cfg.patch_size;
        Self {
            temporal_stride: model.vae.cfg.temporal_factor() as u64,
            spatial_stride: model.vae.cfg.spatial_factor() as u64,
            patch: [p[0] as u64, p[1] as u64, p[2] as u64],
        }
    }

    /// Tokens of `frames` frames of `height` x `width` pixels (the VAE keeps the first frame
    /// and folds each `temporal_stride` after it into one latent frame).
    pub fn tokens(&self, frames: u32, height: u32, width: u32) -> u64 {
        let latent_frames = (frames.max(1) as u64 - 1) / self.temporal_stride + 1;
        self.latent_tokens(latent_frames, height, width)
    }

    /// Tokens of `latent_frames` latent frames at `height` x `width` pixels; the patch embedding
    /// is a strided convolution, so a partial patch makes no token.
    pub fn latent_tokens(&self, latent_frames: u64, height: u32, width: u32) -> u64 {
        let [pt, ph, pw] = self.patch.map(|p| p.max(1));
        let side = |pixels: u32, patch: u64| pixels as u64 / self.spatial_stride.max(1) / patch;
        latent_frames / pt * side(height, ph) * side(width, pw)
    }
}

/// A request's tokens on `model`: its output frames at its size.
pub fn work(model: &WanModel) -> WorkCount {
    let g = TokenGeometry::of(model);
    Arc::new(move |r: &ResolvedRequest| g.tokens(r.num_frames, r.height, r.width))
}

/// A world session step's tokens: one chunk of latent frames at the model's size.
pub fn world_work(world: &WorldModel) -> WorkCount {
    let g = TokenGeometry::of(&world.wan);
    let (chunk, height, width) = (world.spec.chunk_frames as u64, world.spec.height, world.spec.width);
    Arc::new(move |_: &ResolvedRequest| g.latent_tokens(chunk, height, width))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Wan 2.1: 4x temporal and 8x spatial VAE strides, a 1x2x2 patch.
    const WAN21: TokenGeometry = TokenGeometry { temporal_stride: 4, spatial_stride: 8, patch: [1, 2, 2] };

    #[test]
    fn tokens_are_the_transformers_sequence() {
        // 81 frames at 480x832: 21 latent frames of 30x52 patches.
        assert_eq!(WAN21.tokens(81, 480, 832), 21 * 30 * 52);
        assert_eq!(WAN21.tokens(1, 64, 64), 16, "a picture is one latent frame");
        // Wan 2.2 TI2V: a 16x VAE (its 2x2 patches included) under the same transformer patch.
        let ti2v = TokenGeometry { spatial_stride: 16, ..WAN21 };
        assert_eq!(ti2v.tokens(121, 704, 1280), 31 * 22 * 40);
    }

    #[test]
    fn sizes_with_as_many_tokens_share_a_count() {
        // Other pixels, the same work: transposed sizes, and frame counts the VAE folds alike.
        assert_eq!(WAN21.tokens(81, 480, 832), WAN21.tokens(81, 832, 480));
        assert_eq!(WAN21.tokens(17, 64, 128), WAN21.tokens(17, 128, 64));
        assert_eq!(WAN21.tokens(17, 32, 128), WAN21.tokens(17, 64, 64));
        assert_ne!(WAN21.tokens(17, 64, 64), WAN21.tokens(21, 64, 64));
    }
}
