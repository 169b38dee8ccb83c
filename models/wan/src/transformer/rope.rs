//! 3-D rotary position tables (diffusers' `WanRotaryPosEmbed`).

use tch::{Device, Kind, Tensor};

/// Latent grid (frames, height, width after patching), first frame position and device a
/// [`Rope`] was built for.
pub(super) type RopeKey = (i64, i64, i64, i64, Device);

/// Rotary tables for one input shape: `cos`/`sin` are `[N, D/2]` float32 (one value per rotated
/// pair), as diffusers keeps them in float32 whatever the model's dtype.
pub struct Rope {
    pub(super) cos: Tensor,
    pub(super) sin: Tensor,
}

impl Rope {
    /// Per-axis frequencies as in diffusers' `WanRotaryPosEmbed`: the head dim splits into
    /// t/h/w parts (h = w = 2*(D/6), t = the rest), each with `1/theta^(2i/dim)` frequencies;
    /// frames at positions `first_frame..first_frame + grid[0]` (0.. for a whole clip, a causal
    /// chunk's absolute positions otherwise).
    pub fn at(head_dim: i64, grid: [i64; 3], first_frame: i64, device: Device) -> Self {
        let hw = 2 * (head_dim / 6);
        let dims = [head_dim - 2 * hw, hw, hw];
        let (f, h, w) = (grid[0], grid[1], grid[2]);
        let mut parts = Vec::new();
        for (axis, &dim) in dims.iter().enumerate() {
            let inv = Tensor::arange_start_step(0, dim, 2, (Kind::Double, Device::Cpu)) / dim as f64;
            let inv = Tensor::from(10000f64).pow(&inv).reciprocal();
            let first = if axis == 0 { first_frame } else { 0 };
            let pos = Tensor::arange_start(first, first + grid[axis], (Kind::Double, Device::Cpu));
            let ang = pos.outer(&inv); // [len, dim/2]
            let view: [i64; 4] = match axis {
                0 => [f, 1, 1, -1],
                1 => [1, h, 1, -1],
                _ => [1, 1, w, -1],
            };
            parts.push(ang.view(view).expand([f, h, w, dim / 2], false));
        }
        let ang = Tensor::cat(&parts, -1).reshape([f * h * w, head_dim / 2]);
        Self {
            cos: ang.cos().to_kind(Kind::Float).to_device(device),
            sin: ang.sin().to_kind(Kind::Float).to_device(device),
        }
    }

    pub(super) fn shallow_clone(&self) -> Self {
        Self { cos: self.cos.shallow_clone(), sin: self.sin.shallow_clone() }
    }

    /// The tables of tokens `start..start + len` (a sequence-parallel rank's slice).
    pub(super) fn rows(&self, start: i64, len: i64) -> Self {
        Self { cos: self.cos.narrow(0, start, len), sin: self.sin.narrow(0, start, len) }
    }
}
