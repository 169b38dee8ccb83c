//! The Wan 2.1 model family in tch: `WanTransformer3DModel`, the `AutoencoderKLWan` video VAE,
//! the UMT5 text encoder and its tokenizer, diffusers-layout loading, and the text-to-video
//! [`pipeline`]. Each component is `Config` + `new(cfg, weights)`; module paths equal checkpoint
//! keys. Parity with diffusers/transformers is tested against fixtures in `tests/fixtures/`.

pub mod bench;
pub mod causal;
pub mod chunk_rollout;
pub mod config;
pub mod loader;
pub mod nn;
pub mod parallel;
pub mod parallel_bench;
pub mod pipeline;
pub mod scheduler;
pub mod sequence_parallel;
pub mod session_loop;
pub mod sessions;
pub mod tokenizer;
pub mod transformer;
pub mod umt5;
pub mod update;
pub mod vae;
pub mod weights;
pub mod world;

pub use loader::{LoadOptions, LoadReport, RunDefaults, WanModel, VAE_CUDA_DEFAULT};
pub use transformer::{TransformerConfig, WanTransformer3DModel};
pub use umt5::{Umt5Config, Umt5Encoder};
pub use vae::{AutoencoderKLWan, VaeConfig};
pub use weights::Weights;
