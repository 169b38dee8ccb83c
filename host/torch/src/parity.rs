//! How parity tests read their fixtures and measure errors: the same in every model crate, so
//! the tolerances written next to the tests mean the same thing.

use std::collections::HashMap;
use std::path::Path;

use tch::{Kind, Tensor};

/// Every tensor of the safetensors file at `path`, on the CPU (panics naming the file: for
/// tests).
pub fn load_fixture(path: &Path) -> HashMap<String, Tensor> {
    Tensor::read_safetensors(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).into_iter().collect()
}

/// Largest absolute difference, in float64.
pub fn max_abs(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.size(), b.size(), "shapes differ");
    (a.to_kind(Kind::Double) - b.to_kind(Kind::Double)).abs().max().double_value(&[])
}

/// `max |a − b| / max |b|`, in float64.
pub fn rel(a: &Tensor, b: &Tensor) -> f64 {
    max_abs(a, b) / b.abs().max().double_value(&[]).max(1e-12)
}
