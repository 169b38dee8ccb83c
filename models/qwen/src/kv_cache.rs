//! Keys and values of the positions seen so far, per layer, contiguous: `[B, kv_heads, S, D]`.
//! (The paged cache of the decode loop replaces this for serving; this one is the reference it
//! must match token for token.)

use tch::Tensor;

#[derive(Default)]
pub struct KvCache {
    layers: Vec<Option<(Tensor, Tensor)>>,
    len: i64,
}

impl KvCache {
    pub fn new(layers: usize) -> Self {
        Self { layers: (0..layers).map(|_| None).collect(), len: 0 }
    }

    /// Positions held (the next token's position).
    pub fn len(&self) -> i64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends this step's `k, v` (`[B, kv_heads, T, D]`) to layer `i` and returns all of them.
    pub fn append(&mut self, i: usize, k: Tensor, v: Tensor) -> (Tensor, Tensor) {
        let slot = &mut self.layers[i];
        let (k, v) = match slot.take() {
            Some((pk, pv)) => (Tensor::cat(&[pk, k], 2), Tensor::cat(&[pv, v], 2)),
            None => (k, v),
        };
        *slot = Some((k.shallow_clone(), v.shallow_clone()));
        (k, v)
    }

    /// Called once per forward, after every layer appended `t` positions.
    pub fn advance(&mut self, t: i64) {
        self.len += t;
    }
}
