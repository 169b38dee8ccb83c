//! LTX-2 in tch: diffusers' `LTX2Pipeline` folders served as a family — Gemma 3 and the text
//! connectors, the audio-video transformer (two streams that attend to each other), the video
//! and audio VAEs' decoders, the vocoder, and one denoise loop over both streams with guidance
//! per stream.

#![deny(missing_docs)]

pub mod attention;
pub mod audio_vae;
pub mod bench;
pub mod block;
pub mod condition;
pub mod config;
pub mod connectors;
pub mod denoise;
pub mod embed;
pub mod family;
pub mod gemma;
pub mod guidance;
pub mod keyframes;
pub mod latents;
pub mod lora_keys;
pub mod model;
pub mod pipeline;
pub mod prompt;
pub mod refine;
pub mod rope;
pub mod schedule;
mod stepping;
pub mod transformer;
pub mod upsampler;
pub mod values;
pub mod video_encoder;
pub mod video_vae;
pub mod vocoder;

pub use audio_vae::Ltx2AudioDecoder;
pub use config::TransformerConfig;
pub use connectors::{ConnectedText, Ltx2Connectors};
pub use gemma::GemmaEncoder;
pub use model::Ltx2Model;
pub use transformer::{Ltx2Inputs, Ltx2Transformer};
pub use upsampler::Ltx2LatentUpsampler;
pub use video_encoder::Ltx2VideoEncoder;
pub use video_vae::Ltx2VideoDecoder;
pub use vocoder::Ltx2Vocoder;
