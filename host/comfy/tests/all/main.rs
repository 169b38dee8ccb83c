//! Every integration test of this crate, as modules of one test binary (wasmtime's `tests/all`
//! layout, as in the workspace's other crates, whose test binaries each link libtorch): one link
//! per crate instead of one per file. Add a suite as a module here.
//! One suite: `cargo test -p fastvideo-comfy --test all -- corpus::`.

mod av;
mod common;
mod corpus;
mod edits;
mod formats;
mod media_inputs;
