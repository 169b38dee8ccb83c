//! FLUX.2's samples of a packed forward ([`fastvideo_layers::joint`]): their tokens, times and
//! four-axis positions.

use tch::{Kind, Tensor};

pub use fastvideo_layers::joint::Layout;

/// One sample of a packed forward.
pub struct Sample<'a> {
    /// Image tokens `[Si, in]` (noise tokens, then any reference tokens).
    pub image: &'a Tensor,
    /// Prompt embeddings `[St, joint]`.
    pub text: &'a Tensor,
    /// The sample's time in `[0, 1]` (the pipeline's `t / 1000`).
    pub timestep: f32,
    /// Positions `[Si, 4]` of the image tokens.
    pub image_ids: &'a Tensor,
    /// Positions `[St, 4]` of the text tokens.
    pub text_ids: &'a Tensor,
}

/// The layout of `samples`.
pub fn layout(samples: &[Sample]) -> Layout {
    let times: Vec<f32> = samples.iter().map(|s| s.timestep).collect();
    Layout::new(
        samples.iter().map(|s| s.text.size()[0]).collect(),
        samples.iter().map(|s| s.image.size()[0]).collect(),
        &times,
    )
}

/// The model times `[B]` of `samples` (`t · 1000` in the compute dtype, as the reference).
pub fn timesteps(samples: &[Sample], kind: Kind, device: tch::Device) -> Tensor {
    let t: Vec<f32> = samples.iter().map(|s| s.timestep).collect();
    Tensor::from_slice(&t).to_device(device).to_kind(kind) * 1000.0
}

/// Positions `[h·w, 4]` of an `h`×`w` token grid at time `t`: `(t, row, column, 0)`.
pub fn positions(t: i64, h: i64, w: i64, device: tch::Device) -> Tensor {
    let opts = (Kind::Int64, device);
    let rows = Tensor::arange(h, opts).view([h, 1]).expand([h, w], false).reshape([-1]);
    let cols = Tensor::arange(w, opts).view([1, w]).expand([h, w], false).reshape([-1]);
    let fill = |v: i64| Tensor::full([h * w], v, opts);
    Tensor::stack(&[fill(t), rows, cols, fill(0)], 1)
}

/// Positions `[L, 4]` of `L` text tokens: `(0, 0, 0, index)`.
pub fn text_positions(len: i64, device: tch::Device) -> Tensor {
    let opts = (Kind::Int64, device);
    let zeros = Tensor::zeros([len], opts);
    Tensor::stack(&[zeros.shallow_clone(), zeros.shallow_clone(), zeros, Tensor::arange(len, opts)], 1)
}
