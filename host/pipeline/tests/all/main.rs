//! Every integration test of this crate, as modules of one test binary (wasmtime's `tests/all`
//! layout): each test binary links libtorch, hundreds of MB and the slowest step of a CI build,
//! so one binary per crate instead of one per file. Add a suite as a module here.
//! One suite: `cargo test -p fastvideo-pipeline --test all -- driver::`.

mod adapter_cache;
mod driver;
mod family_layout;
mod sampler_parity;
mod sound;
