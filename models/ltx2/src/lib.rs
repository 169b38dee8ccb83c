//! LTX-2 in tch: the audio-video transformer of diffusers' `LTX2Pipeline` folders, its rotary
//! positions and modulations (the rest of the family — text connectors, the video and audio
//! VAEs, the vocoder, the pipelines — lands beside it).

#![deny(missing_docs)]

pub mod attention;
pub mod audio_vae;
pub mod block;
pub mod config;
pub mod connectors;
pub mod embed;
pub mod gemma;
pub mod guidance;
pub mod latents;
pub mod rope;
pub mod schedule;
pub mod transformer;
pub mod upsampler;
pub mod video_vae;
pub mod vocoder;

pub use audio_vae::Ltx2AudioDecoder;
pub use config::TransformerConfig;
pub use connectors::{ConnectedText, Ltx2Connectors};
pub use gemma::GemmaEncoder;
pub use transformer::{Ltx2Inputs, Ltx2Transformer};
pub use upsampler::Ltx2LatentUpsampler;
pub use video_vae::Ltx2VideoDecoder;
pub use vocoder::Ltx2Vocoder;
