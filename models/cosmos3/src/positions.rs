//! mRoPE positions of a Cosmos3 packed sequence, as the pipeline builds them: text `0..L` on all
//! three axes; every generated modality from the same offset `L + margin` (vision, sound and
//! action are temporal siblings, not sequential), time scaled to the model's base frame rate
//! when fps modulation is on and the grid has more than one frame.

use tch::{Device, Kind, Tensor};

/// How one modality's time axis maps onto positions.
#[derive(Clone, Copy, Debug)]
pub struct TimeAxis {
    /// Frames per second of this modality's source (video fps, sound latent fps); `None` when
    /// fps modulation is off.
    pub fps: Option<f64>,
    /// The model's `base_fps`.
    pub base_fps: f64,
    /// Source frames per token along time (4 for video latents, 1 for sound and actions).
    pub compression: i64,
    /// The compression the base rate is counted in (actions: the video's 4).
    pub base_compression: i64,
    /// Index of the first token's frame (actions start at 1).
    pub start: i64,
}

/// Positions `[3, t·h·w]` float32 of a token grid whose time starts at `offset`; spatial axes
/// count from 0 (`reset_spatial`) or from `offset`.
pub fn grid_positions(grid: [i64; 3], offset: i64, axis: TimeAxis, reset_spatial: bool) -> Tensor {
    let [t, h, w] = grid;
    let opts = (Kind::Float, Device::Cpu);
    let t_index = match axis.fps {
        Some(fps) if t > 1 => {
            let tps = fps / axis.compression as f64;
            let base_tps = axis.base_fps / axis.base_compression as f64;
            (Tensor::arange(t, opts) + axis.start as f64) / tps * base_tps + offset as f64
        }
        _ => (Tensor::arange(t, (Kind::Int64, Device::Cpu)) + offset + axis.start).to_kind(Kind::Float),
    };
    let t_index = t_index.view([t, 1]).expand([t, h * w], false).reshape([-1]);
    let spatial = if reset_spatial { 0 } else { offset };
    let h_index = (Tensor::arange(h, opts).view([1, h, 1]).expand([t, h, w], false).reshape([-1])) + spatial as f64;
    let w_index = (Tensor::arange(w, opts).view([1, 1, w]).expand([t, h, w], false).reshape([-1])) + spatial as f64;
    Tensor::stack(&[t_index, h_index, w_index], 0)
}
