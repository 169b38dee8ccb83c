//! Integration tests of fastvideo-ltx2: one binary (CI links libtorch once per crate).

mod audio_vae;
mod bench;
mod common;
mod connectors;
mod gemma;
mod guidance;
mod keyframes;
mod latents;
mod lora;
mod schedule;
mod transformer;
mod upsampler;
mod video_vae;
mod vocoder;
