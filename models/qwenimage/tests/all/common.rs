//! Fixture paths and comparisons shared by the suites.

use std::collections::HashMap;
use std::path::PathBuf;

use tch::Tensor;

/// `tests/fixtures/<rel>` of the workspace.
pub fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(rel)
}

/// The tiny Qwen-Image folder.
pub fn folder() -> PathBuf {
    fixture("tiny-qwenimage")
}

/// Every tensor of a safetensors fixture, on the CPU.
pub fn load(rel: &str) -> HashMap<String, Tensor> {
    fastvideo_torch::parity::load_fixture(&fixture(rel))
}

pub use fastvideo_torch::parity::rel;
