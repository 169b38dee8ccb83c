//! Every integration test of this crate, as modules of one test binary (wasmtime's `tests/all`
//! layout): each test binary links libtorch, hundreds of MB and the slowest step of a CI build,
//! so one binary per crate instead of one per file. Add a suite as a module here.
//! One suite: `cargo test -p fastvideo-plugin-host --test all -- guider::`.

mod block_cache;
mod common;
mod embedding;
mod exact_mode;
mod guider;
mod guiders;
mod image_translators;
mod leaks;
mod loop_hooks;
mod python_guest;
mod rewards;
mod router;
mod stream_guider;
mod translators;
