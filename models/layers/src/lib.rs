//! Layers and helpers every model family shares, in candle-nn's role: what belongs here has no
//! family's shapes in it (no block layout, no checkpoint names beyond a module's own `weight` and
//! `bias`), so a new family uses these instead of copying them from another. [`linear`] (FP8
//! weights, adapter slots, fused projections), [`heads`], [`conv`], the strict `config.json`
//! reader ([`config`]), host offload over linears ([`offload`]), Ulysses sequence parallelism
//! ([`sequence_parallel`]), tokenizer padding ([`tokenizer`]), the CLIP image processor
//! ([`image_processor`]) and how benchmarks measure ([`measure`]). Weights come from `fastvideo_torch::weights::Weights`; what walks a
//! family's own modules (which linears a transformer has, in which groups) stays in the family.

#![deny(missing_docs)]

pub mod adapters;
pub mod block_stream;
pub mod config;
pub mod conv;
pub mod flow_match;
pub mod heads;
pub mod image_processor;
pub mod joint;
pub mod linear;
pub mod measure;
pub mod offload;
pub mod quant_config;
pub mod sequence_parallel;
pub mod single_file;
pub mod timestep;
pub mod tokenizer;

pub use linear::{tensor_bytes, Linear, LinearPart, Lora};
