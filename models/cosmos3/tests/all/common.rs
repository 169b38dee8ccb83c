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
    let path = fixture(rel);
    Tensor::read_safetensors(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).into_iter().collect()
}

/// Largest absolute difference, in float64.
pub fn max_abs(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.size(), b.size(), "shapes differ");
    (a.to_kind(Kind::Double) - b.to_kind(Kind::Double)).abs().max().double_value(&[])
}

/// Integer tensor as a vector.
pub fn ints(t: &Tensor) -> Vec<i64> {
    Vec::<i64>::try_from(t.to_kind(Kind::Int64).reshape([-1])).unwrap()
}

/// `max |a − b| / max |b|`, in float64.
pub fn rel(a: &Tensor, b: &Tensor) -> f64 {
    max_abs(a, b) / b.abs().max().double_value(&[]).max(1e-12)
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
