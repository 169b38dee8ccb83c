//! Rotary position embedding, the "rotate half" form transformers uses for Qwen: the head dim's
//! first and second halves are the pair, frequencies `theta^(-2i/d)` in float32.
//!
//! The sine table carries rotate-half's sign (its first half negated), so the rotation is a swap
//! of halves and one multiply-add: `x·cos + swap(x)·sin±`, three launches instead of five. A
//! negation is exact, so the products equal transformers' `rotate_half(x)·sin`.

use tch::{Device, Kind, Tensor};

/// The rotary embedding's frequencies; tables for given positions are built from them.
pub struct Rope {
    /// `[head_dim / 2]` float32.
    inv_freq: Tensor,
}

impl Rope {
    /// Frequencies `theta^(-2i/head_dim)` on `device`.
    pub fn new(head_dim: i64, theta: f64, device: Device) -> Self {
        let exps =
            Tensor::arange_start_step(0, head_dim, 2, (Kind::Int64, device)).to_kind(Kind::Float) / head_dim as f64;
        let powers = Tensor::scalar_tensor(theta, (Kind::Float, device)).pow(&exps);
        Self { inv_freq: powers.ones_like() / powers }
    }

    /// `cos` and the signed `sin` (first half negated) of angles `freqs [.., head_dim / 2]`,
    /// `[.., head_dim]` in `kind`.
    fn of(freqs: &Tensor, kind: Kind) -> (Tensor, Tensor) {
        let (cos, sin) = (freqs.cos(), freqs.sin());
        (Tensor::cat(&[&cos, &cos], -1).to_kind(kind), Tensor::cat(&[&sin.neg(), &sin], -1).to_kind(kind))
    }

    /// `cos, sin±` of shape `[T, head_dim]` for absolute positions `start..start + len`, in `kind`.
    pub fn tables(&self, start: i64, len: i64, kind: Kind) -> (Tensor, Tensor) {
        let pos = Tensor::arange_start(start, start + len, (Kind::Int64, self.inv_freq.device())).to_kind(Kind::Float);
        Self::of(&(pos.unsqueeze(1) * self.inv_freq.unsqueeze(0)), kind)
    }

    /// `cos, sin±` `[T, head_dim]` of multimodal positions `positions [3, T]` (time, row,
    /// column; int64): frequency `j` takes the axis of its section in `sections` (Qwen2.5-VL's
    /// `mrope_section`, which sums to `head_dim / 2`). Text, equal on every axis, gets what
    /// [`Self::tables`] gives.
    pub fn tables_3d(&self, positions: &Tensor, sections: [i64; 3], kind: Kind) -> (Tensor, Tensor) {
        let device = self.inv_freq.device();
        let axis: Vec<i64> = (0..3).flat_map(|a| std::iter::repeat_n(a as i64, sections[a] as usize)).collect();
        let axis = Tensor::from_slice(&axis).to_device(device);
        let pos = positions.to_device(device).to_kind(Kind::Float);
        // [T, half]: each frequency reads its axis' position.
        let picked = pos.tr().index_select(1, &axis);
        Self::of(&(picked * self.inv_freq.unsqueeze(0)), kind)
    }

    /// `cos, sin±` of shape `[B, 1, 1, head_dim]` for one position per row (`positions [B]`
    /// int64): a decode batch's rows, each at its own place.
    pub fn tables_at(&self, positions: &Tensor, kind: Kind) -> (Tensor, Tensor) {
        let freqs = positions.to_kind(Kind::Float).unsqueeze(1) * self.inv_freq.unsqueeze(0);
        let (cos, sin) = Self::of(&freqs, kind);
        (cos.unsqueeze(1).unsqueeze(1), sin.unsqueeze(1).unsqueeze(1))
    }

    /// `x [B, H, T, D]` rotated by the tables of its `T` positions (from [`Self::tables`] or
    /// [`Self::tables_at`]).
    pub fn apply(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Tensor {
        let half = x.size()[3] / 2;
        let swapped = Tensor::cat(&[x.narrow(3, half, half), x.narrow(3, 0, half)], 3);
        (x * cos).addcmul(&swapped, sin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn position_zero_is_the_identity_and_rotation_keeps_norms() {
        let rope = Rope::new(8, 10000.0, Device::Cpu);
        let x = Tensor::randn([1, 2, 3, 8], (Kind::Float, Device::Cpu));
        let (cos, sin) = rope.tables(0, 3, Kind::Float);
        let y = Rope::apply(&x, &cos, &sin);
        assert!(y.narrow(2, 0, 1).allclose(&x.narrow(2, 0, 1), 1e-6, 1e-6, false));
        let norms = |t: &Tensor| t.square().sum_dim_intlist(-1, false, Kind::Float);
        assert!(norms(&y).allclose(&norms(&x), 1e-5, 1e-5, false));
        assert!(!y.allclose(&x, 1e-3, 1e-3, false), "later positions rotate");
    }

    #[test]
    fn equals_transformers_rotate_half() {
        let rope = Rope::new(8, 10000.0, Device::Cpu);
        let x = Tensor::randn([2, 3, 5, 8], (Kind::Float, Device::Cpu));
        let (cos, sin) = rope.tables(7, 5, Kind::Float);
        let pos = Tensor::arange_start(7, 12, (Kind::Float, Device::Cpu)).unsqueeze(1);
        let emb = pos * rope.inv_freq.unsqueeze(0);
        let emb = Tensor::cat(&[&emb, &emb], -1);
        let (x1, x2) = (x.narrow(3, 0, 4), x.narrow(3, 4, 4));
        let want = &x * emb.cos() + Tensor::cat(&[&x2.neg(), &x1], 3) * emb.sin();
        assert!(Rope::apply(&x, &cos, &sin).allclose(&want, 1e-6, 1e-6, false));
        // Per-row tables at those positions give the same rotation.
        let (c, s) = rope.tables_at(&Tensor::from_slice(&[9i64, 9]), Kind::Float);
        let row = Rope::apply(&x.narrow(2, 2, 1), &c, &s);
        assert!(row.allclose(&want.narrow(2, 2, 1), 1e-6, 1e-6, false));
    }
}
