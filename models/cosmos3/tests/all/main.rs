//! Integration tests of fastvideo-cosmos3: one binary (CI links libtorch once per crate).

mod actions;
mod common;
mod pipeline;
mod reasoner;
mod sound;
mod transformer;
