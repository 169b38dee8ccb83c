//! FLUX.2 [klein] in tch: a diffusers `Flux2KleinPipeline` folder served as an image model,
//! text to image and edits with reference pictures.

#![deny(missing_docs)]

pub mod bench;
pub mod condition;
pub mod config;
pub mod denoise;
pub mod double_block;
pub mod embed;
pub mod family;
pub mod feed_forward;
pub mod lora_keys;
pub mod model;
pub mod packed;
pub mod pipeline;
pub mod prompt;
pub mod rope;
pub mod schedule;
pub mod single_block;
pub mod transformer;
pub mod vae;
pub mod values;

pub use transformer::Flux2Transformer;
