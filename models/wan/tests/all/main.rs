//! Every integration test of this crate, as modules of one test binary (wasmtime's `tests/all`
//! layout): each test binary links libtorch, hundreds of MB and the slowest step of a CI build,
//! so one binary per crate instead of one per file. Add a suite as a module here.
//! One suite: `cargo test -p fastvideo-wan --test all -- parity::`.

mod batching;
mod causal;
mod common;
mod fp8;
mod image_to_video;
mod int8_attention;
mod loading;
mod lora;
mod parallel;
mod parity;
mod partial;
mod preview;
mod published_layout;
mod rl_consistency;
mod streaming;
mod tiny_vae;
mod wan22;
mod world;
