//! Integration tests of fastvideo-flux2: one binary (CI links libtorch once per crate).

mod common;
mod components;
mod lora;
mod packing;
mod pipeline;
