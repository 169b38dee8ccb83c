//! The Wan 2.1 model family in tch: `WanTransformer3DModel`, the `AutoencoderKLWan` video VAE,
//! the UMT5 text encoder and its tokenizer, the CLIP image encoder of image-to-video models,
//! diffusers-layout loading, and the text- and image-to-video [`pipeline`]s. Each component is
//! `Config` + `new(cfg, weights)`; module paths equal checkpoint keys. Parity with
//! diffusers/transformers is tested against fixtures in `tests/fixtures/`.

#![deny(missing_docs)]

pub mod adapters;
pub mod bench;
pub mod causal;
pub mod chunk_rollout;
pub mod clip_vision;
pub mod device_budget;
pub mod experts;
pub mod family;
pub mod first_frame_condition;
pub mod formats_bench;
pub mod image_condition;
mod image_encode;
pub mod image_resize;
mod load_options;
pub mod loader;
pub mod lora_bench;
pub mod lora_keys;
pub mod offline_rollout;
pub mod offload;
pub mod parallel;
pub mod parallel_bench;
pub mod pipeline;
pub mod preview;
pub mod residency;
pub mod scheduler;
pub mod session_loop;
pub mod sessions;
pub mod single_file;
pub mod tiny_vae;
pub mod transformer;
pub mod umt5;
pub mod update;
pub mod vae;
pub mod values;
mod video_encode;
pub use fastvideo_torch::weights;
pub mod work;
pub mod world;

pub use loader::{LoadOptions, LoadReport, RunDefaults, WanModel, VAE_CUDA_DEFAULT};
pub use transformer::{TransformerConfig, WanTransformer3DModel};
pub use umt5::{Umt5Config, Umt5Encoder};
pub use vae::{AutoencoderKLWan, VaeConfig};
pub use weights::Weights;
