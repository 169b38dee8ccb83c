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
