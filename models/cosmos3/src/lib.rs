//! Cosmos3 omni (NVIDIA) in tch, from diffusers `Cosmos3OmniPipeline` folders: one
//! mixture-of-transformers whose text pathway is a Qwen3-VL language model and whose generation
//! pathway denoises Wan 2.2-VAE video latents, sound and robot actions, the two meeting in one
//! joint attention per layer. Parity with diffusers is tested against fixtures made by
//! `tests/fixtures/make_cosmos3_fixtures.py`.

#![deny(missing_docs)]

pub mod action;
mod attention;
pub mod bench;
pub mod condition;
pub mod config;
pub mod embed;
mod layer;
mod mlp;
mod norm;
pub mod packing;
pub mod positions;
pub mod rope;
pub mod sound;
pub mod transformer;

pub use attention::LayerKv;
pub use config::{Activation, Cosmos3Config};
pub use sound::{SoundTokenizer, SoundTokenizerConfig};
pub use transformer::{Cosmos3Transformer, GenInput, Prediction, Prefix};
pub mod denoise;
pub mod model;
pub mod pipeline;
pub mod prompt;
pub mod reasoner;
pub mod values;

pub use model::Cosmos3Model;
pub mod family;
