//! How `LTX2Pipeline` lays out and scales its latents. Video latents `[B, 128, F, H, W]` become
//! tokens `[B, F·H·W, 128]`; audio latents `[B, 8, L, 16]` become `[B, L, 128]` (channels and
//! mel bins together). Given latents (`--noise`) are normalised — video before packing, by the
//! VAE's per-channel statistics and scaling factor; audio after packing, by the audio VAE's
//! statistics over the packed features — drawn ones are not, as the pipeline does.

use tch::Tensor;

/// `[B, C, F, H, W]` → `[B, F·H·W, C]` (patch size 1).
pub fn pack_video(x: &Tensor) -> Tensor {
    x.flatten(2, 4).transpose(1, 2)
}

/// `[B, F·H·W, C]` → `[B, C, F, H, W]`.
pub fn unpack_video(x: &Tensor, grid: [i64; 3]) -> Tensor {
    let [f, h, w] = grid;
    let b = x.size()[0];
    x.transpose(1, 2).reshape([b, -1, f, h, w])
}

/// `[B, C, L, M]` → `[B, L, C·M]`.
pub fn pack_audio(x: &Tensor) -> Tensor {
    x.transpose(1, 2).flatten(2, 3)
}

/// `[B, L, C·M]` → `[B, C, L, M]`.
pub fn unpack_audio(x: &Tensor, mel_bins: i64) -> Tensor {
    x.unflatten(2, [-1, mel_bins]).transpose(1, 2)
}

/// Video latents `[B, C, F, H, W]` to the transformer's scale: `(x − mean)·scale / std` per
/// channel.
pub fn normalize_video(x: &Tensor, mean: &Tensor, std: &Tensor, scale: f64) -> Tensor {
    let v = |t: &Tensor| t.to_kind(x.kind()).view([1, -1, 1, 1, 1]);
    (x - v(mean)) * scale / v(std)
}

/// The inverse of [`normalize_video`], for the VAE.
pub fn denormalize_video(x: &Tensor, mean: &Tensor, std: &Tensor, scale: f64) -> Tensor {
    let v = |t: &Tensor| t.to_kind(x.kind()).view([1, -1, 1, 1, 1]);
    x * v(std) / scale + v(mean)
}

/// Packed audio latents `[B, L, D]` to the transformer's scale, per packed feature.
pub fn normalize_audio(x: &Tensor, mean: &Tensor, std: &Tensor) -> Tensor {
    (x - mean.to_kind(x.kind())) / std.to_kind(x.kind())
}

/// The inverse of [`normalize_audio`].
pub fn denormalize_audio(x: &Tensor, mean: &Tensor, std: &Tensor) -> Tensor {
    x * std.to_kind(x.kind()) + mean.to_kind(x.kind())
}

/// `noise_scale · noise + (1 − noise_scale) · x` (`_create_noised_state`).
pub fn noised(x: &Tensor, noise: &Tensor, noise_scale: f64) -> Tensor {
    noise * noise_scale + x * (1.0 - noise_scale)
}

/// The VAEs' latent statistics: what given latents are normalised with and final ones
/// denormalised with.
pub struct Statistics {
    /// Video VAE per-channel mean and standard deviation, and its scaling factor.
    pub video: (Tensor, Tensor, f64),
    /// Audio VAE per-feature mean and standard deviation (packed layout).
    pub audio: (Tensor, Tensor),
}

// SAFETY: the weights are read-only after construction and libtorch kernels may read one
// tensor from several threads; nothing here mutates shared state.
unsafe impl Sync for Statistics {}
