//! Fixture paths and comparisons shared by the suites.

use std::collections::HashMap;
use std::path::PathBuf;

use tch::{Kind, Tensor};

/// `tests/fixtures/<rel>` of the workspace.
pub fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(rel)
}

/// Every tensor of a safetensors fixture, on the CPU.
pub fn load(rel: &str) -> HashMap<String, Tensor> {
    fastvideo_torch::parity::load_fixture(&fixture(rel))
}

pub use fastvideo_torch::parity::{max_abs, rel};

/// Integer tensor as a vector.
pub fn ints(t: &Tensor) -> Vec<i64> {
    Vec::<i64>::try_from(t.to_kind(Kind::Int64).reshape([-1])).unwrap()
}

/// A decoded request video from a fixture's RGB8 frames `[F, H, W, 3]`.
pub fn input_video(frames: &Tensor, fps: f64) -> fastvideo_request::InputVideo {
    let (n, h, w, _) = frames.size4().unwrap();
    fastvideo_request::InputVideo {
        width: w as u32,
        height: h as u32,
        fps,
        frames: n as u32,
        rgb: Vec::<u8>::try_from(frames.reshape([-1])).unwrap(),
    }
}
