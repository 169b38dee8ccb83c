//! `AutoencoderKLWan` (diffusers `models/autoencoders/autoencoder_kl_wan.py`; the Wan 2.1 VAE,
//! and Wan 2.2's residual one with `is_residual`): causal 3-D convolutions with a chunked feature
//! cache, so video is encoded as the first frame then chunks of 4 and decoded one latent frame at
//! a time while the convolutions still see the two previous frames. Compression is 4x in time
//! (`4k+1` frames → `k+1`) and 8x in space, times the patch size (Wan 2.2: 2x2 pixels folded
//! into channels before the encoder, 16x in all).
//!
//! One file per component: the config, the feature cache, the causal conv, the residual and
//! attention blocks, the resamplers, the layer stack both coders share, the encoder, the
//! decoder, and the autoencoder that joins them.

mod attention;
mod cache;
mod coder;
mod config;
mod conv;
mod decoder;
mod encoder;
mod model;
mod resample;
mod residual;
mod residual_blocks;

pub use config::VaeConfig;
pub use model::{AutoencoderKLWan, DecodeStream};
