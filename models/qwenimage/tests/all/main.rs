//! Integration tests of fastvideo-qwenimage: one binary (CI links libtorch once per crate).

mod common;
mod components;
mod edit;
mod lora;
mod pipeline;
