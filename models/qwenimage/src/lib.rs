//! Qwen-Image in tch: a diffusers `QwenImagePipeline` folder served as an image model.

#![deny(missing_docs)]

pub mod bench;
pub mod block;
pub mod config;
pub mod denoise;
pub mod edit;
pub mod family;
pub mod latents;
pub mod lora_keys;
pub mod model;
pub mod pipeline;
pub mod prompt;
pub mod rope;
pub mod transformer;
pub mod values;

pub use transformer::QwenImageTransformer;
