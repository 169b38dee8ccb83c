//! Every test of fastvideo-layers, as modules of one test binary (wasmtime's `tests/all` layout;
//! the crate has no unit-test binary): each test binary links libtorch, so one per crate.
//! One suite: `cargo test -p fastvideo-layers --test all -- image_processor::`.

mod config;
mod image_processor;
mod linear;
mod quant_config;
mod sequence_parallel;
mod tokenizer;

/// `tests/fixtures/<name>` at the repository root (shared with the families' parity tests).
pub fn fixture_path(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name)
}
