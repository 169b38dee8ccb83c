//! The tiny video decoder (`tiny_vae/` in a model folder): a TAEHV-class decoder trained by this
//! project against the model's own VAE (models/training/train_tiny_vae.py), for previews and
//! for world sessions that opt into it. It takes the full VAE's latents and gives the same
//! frames, approximately, at a fraction of the cost: 2-D convolutions per frame with a memory of
//! one frame per block instead of 3-D causal convolutions over a cache.
//!
//! One file per component: the config, the decoder (its blocks and the streaming state).

mod config;
mod decoder;

pub use config::TinyDecoderConfig;
pub use decoder::{TinyDecodeStream, TinyVideoDecoder, DECODE_CHUNK_FRAMES};
