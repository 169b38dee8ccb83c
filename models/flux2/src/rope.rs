//! FLUX.2's rotary embedding: four axes (time, row, column, text position), each rotating its
//! own slice of the head in interleaved pairs `(x[2i], x[2i+1])` (the rotation is
//! `fastvideo_layers::joint::rotate`). Angles are computed in float64 and the tables kept in
//! float32, as diffusers' `Flux2PosEmbed`.

use tch::{Device, Kind, Tensor};

/// The per-axis frequencies of a head.
pub struct Rope {
    /// `[head_dim / 2]` float64: each pair's frequency.
    inv_freq: Tensor,
    /// `[head_dim / 2]` int64: the axis of each pair.
    axis: Tensor,
}

impl Rope {
    /// Frequencies `theta^(-2i/d)` of each axis of width `d` in `axes`, on `device`.
    pub fn new(axes: &[i64], theta: f64, device: Device) -> Self {
        let mut freqs = Vec::new();
        let mut axis = Vec::new();
        for (a, &d) in axes.iter().enumerate() {
            for i in (0..d).step_by(2) {
                freqs.push(1.0 / theta.powf(i as f64 / d as f64));
                axis.push(a as i64);
            }
        }
        Self {
            inv_freq: Tensor::from_slice(&freqs).to_device(device),
            axis: Tensor::from_slice(&axis).to_device(device),
        }
    }

    /// `cos, sin` `[S, head_dim]` float32, each angle repeated for its pair, of positions
    /// `ids [S, axes]` (integers).
    pub fn tables(&self, ids: &Tensor) -> (Tensor, Tensor) {
        let pos = ids.to_device(self.inv_freq.device()).to_kind(Kind::Float).to_kind(Kind::Double);
        // Each pair reads its axis' coordinate.
        let coords = pos.index_select(1, &self.axis);
        let angles = coords * self.inv_freq.unsqueeze(0);
        let pairs = |t: Tensor| t.repeat_interleave_self_int(2, 1, None).to_kind(Kind::Float);
        (pairs(angles.cos()), pairs(angles.sin()))
    }
}
