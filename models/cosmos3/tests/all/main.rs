//! Integration tests of fastvideo-cosmos3: one binary (CI links libtorch once per crate).

mod common;
mod sound;
mod transformer;
