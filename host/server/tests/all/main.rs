//! Every integration test of the server, as modules of one test binary (wasmtime's `tests/all`
//! layout): each test binary links libtorch, the slowest step of a CI build, so one binary per
//! crate. Add a suite as a module here; run one with `cargo test -p fastvideo-server --test all
//! -- hostile::`.

mod common;
mod hostile;
mod knobs;
mod router;
mod sound;
mod uploads;
