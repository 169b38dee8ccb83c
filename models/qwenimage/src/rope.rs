//! Qwen-Image's rotary positions: three axes (frame, row, column). Image rows and columns are
//! centred on the picture (`scale_rope`: rows `-(h - h/2) .. h/2`), the frame axis counts the
//! pictures of a sample (0 for the output, 1, 2, … for an edit's references); text tokens
//! continue after the largest half-side, the same index on every axis. Frequencies
//! `theta^(-2i/d)` in float32, as diffusers' `QwenEmbedRope` builds them.

use tch::{Device, Kind, Tensor};

/// The per-axis frequencies.
pub struct QwenRope {
    axes: [i64; 3],
    /// `[head_dim / 2]` float32.
    inv_freq: Tensor,
    /// `[head_dim / 2]` int64: each pair's axis.
    axis: Tensor,
}

impl QwenRope {
    /// Frequencies of `axes` with theta 10000 on `device`.
    pub fn new(axes: [i64; 3], device: Device) -> Self {
        let mut freqs = Vec::new();
        let mut axis = Vec::new();
        for (a, &d) in axes.iter().enumerate() {
            for i in (0..d).step_by(2) {
                freqs.push(1.0f32 / 10000f32.powf(i as f32 / d as f32));
                axis.push(a as i64);
            }
        }
        Self {
            axes,
            inv_freq: Tensor::from_slice(&freqs).to_device(device),
            axis: Tensor::from_slice(&axis).to_device(device),
        }
    }

    /// Head width the tables cover.
    pub fn head_dim(&self) -> i64 {
        self.axes.iter().sum()
    }

    /// Positions `[h·w, 3]` of picture `frame` of a sample, an `h`×`w` token grid.
    pub fn image_positions(frame: i64, h: i64, w: i64) -> Vec<[i64; 3]> {
        let mut out = Vec::with_capacity((h * w) as usize);
        for y in 0..h {
            for x in 0..w {
                out.push([frame, y - (h - h / 2), x - (w - w / 2)]);
            }
        }
        out
    }

    /// `cos, sin` `[St + Si, head_dim]` (text rows first, as the joint sequence) of a sample with
    /// `text` tokens and pictures `grids` (`(h, w)` each, frame = its index).
    pub fn tables(&self, text: i64, grids: &[(i64, i64)]) -> (Tensor, Tensor) {
        let start = grids.iter().map(|&(h, w)| (h / 2).max(w / 2)).max().unwrap_or(0);
        let mut pos: Vec<[i64; 3]> = (0..text).map(|j| [start + j; 3]).collect();
        for (i, &(h, w)) in grids.iter().enumerate() {
            pos.extend(Self::image_positions(i as i64, h, w));
        }
        let flat: Vec<i64> = pos.iter().flatten().copied().collect();
        let ids = Tensor::from_slice(&flat).view([-1, 3]).to_device(self.inv_freq.device());
        let coords = ids.index_select(1, &self.axis).to_kind(Kind::Float);
        let angles = coords * self.inv_freq.unsqueeze(0);
        let pairs = |t: Tensor| t.repeat_interleave_self_int(2, 1, None);
        (pairs(angles.cos()), pairs(angles.sin()))
    }
}
