//! Fixture paths and comparisons shared by the suites.

use std::collections::HashMap;
use std::path::PathBuf;

use tch::{Kind, Tensor};

/// `tests/fixtures/ltx2/<rel>` of the workspace.
pub fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/ltx2").join(rel)
}

/// Every tensor of a safetensors fixture, on the CPU.
pub fn load(rel: &str) -> HashMap<String, Tensor> {
    let path = fixture(rel);
    Tensor::read_safetensors(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).into_iter().collect()
}

/// `max |a − b| / max |b|`, in float64.
pub fn rel(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.size(), b.size(), "shapes differ");
    let diff = (a.to_kind(Kind::Double) - b.to_kind(Kind::Double)).abs().max().double_value(&[]);
    diff / b.abs().max().double_value(&[]).max(1e-12)
}
