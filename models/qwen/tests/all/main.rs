//! Integration tests of fastvideo-qwen: one binary (CI links libtorch once per crate).

mod chat;
mod decode_loop;
mod extend;
mod parity;
mod serving;
