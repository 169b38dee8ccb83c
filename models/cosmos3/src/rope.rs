//! Interleaved 3-D mRoPE (`Cosmos3VLTextRotaryEmbedding`): each frequency `j` of the head takes
//! the angle of one axis — H where `j % 3 == 1` and `j < 3·sections[1]`, W where `j % 3 == 2` and
//! `j < 3·sections[2]`, T otherwise — of float32 positions (fractional for fps-modulated time,
//! past 15000 for generated modalities: angles stay float32, only cos/sin are rounded).
//! Text has equal axes, so its tables are ordinary 1-D rope.
//!
//! The sine table carries rotate-half's sign (first half negated): the rotation is a swap of
//! halves and one multiply-add, with products equal to the reference's.

use tch::{Device, Kind, Tensor};

/// Frequencies and the axis each takes.
pub struct MRope {
    /// `[head_dim / 2]` float32.
    inv_freq: Tensor,
    /// `[head_dim / 2]` int64: 0 (T), 1 (H) or 2 (W).
    axis: Tensor,
}

impl MRope {
    /// Frequencies `theta^(-2i/head_dim)` and the interleaving of `sections` on `device`.
    pub fn new(head_dim: i64, theta: f64, sections: [i64; 3], device: Device) -> Self {
        let exps =
            Tensor::arange_start_step(0, head_dim, 2, (Kind::Int64, device)).to_kind(Kind::Float) / head_dim as f64;
        let powers = Tensor::scalar_tensor(theta, (Kind::Float, device)).pow(&exps);
        let axis: Vec<i64> = (0..head_dim / 2)
            .map(|j| match j % 3 {
                1 if j < 3 * sections[1] => 1,
                2 if j < 3 * sections[2] => 2,
                _ => 0,
            })
            .collect();
        Self { inv_freq: powers.ones_like() / powers, axis: Tensor::from_slice(&axis).to_device(device) }
    }

    /// The angles `[L, head_dim / 2]` (float32) of positions `[3, L]`: each frequency of its axis.
    fn angles(&self, positions: &Tensor) -> Tensor {
        let pos = positions.to_device(self.inv_freq.device()).to_kind(Kind::Float);
        let l = pos.size()[1];
        let half = self.inv_freq.size()[0];
        // [3, L, half] angles of every axis, then each frequency picks its axis.
        let freqs = pos.unsqueeze(2) * self.inv_freq.view([1, 1, half]);
        let pick = self.axis.view([1, 1, half]).expand([1, l, half], false);
        freqs.gather(0, &pick, false).squeeze_dim(0)
    }

    /// `cos, sin±` `[L, head_dim]` in `kind` for positions `[3, L]` (float32).
    pub fn tables(&self, positions: &Tensor, kind: Kind) -> (Tensor, Tensor) {
        let f = self.angles(positions);
        let (cos, sin) = (f.cos(), f.sin());
        (Tensor::cat(&[&cos, &cos], -1).to_kind(kind), Tensor::cat(&[&sin.neg(), &sin], -1).to_kind(kind))
    }

    /// fp32 `cos, sin` `[L, head_dim / 2]` (one angle per frequency, unsigned) for the fused
    /// norm-and-rotate kernel, their values rounded through `kind` as the reference's tables are.
    pub fn half_tables(&self, positions: &Tensor, kind: Kind) -> (Tensor, Tensor) {
        let f = self.angles(positions);
        let round = |t: Tensor| t.to_kind(kind).to_kind(Kind::Float).contiguous();
        (round(f.cos()), round(f.sin()))
    }

    /// `x [B, H, L, D]` rotated by tables `[L, D]` or `[B, 1, L, D]`.
    pub fn apply(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Tensor {
        let half = x.size()[3] / 2;
        let swapped = Tensor::cat(&[x.narrow(3, half, half), x.narrow(3, 0, half)], 3);
        (x * cos).addcmul(&swapped, sin)
    }
}
