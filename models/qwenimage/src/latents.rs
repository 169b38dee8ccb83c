//! Qwen-Image's packed latents: 2×2 patches of the VAE's latents as tokens, channels
//! `(c, dy, dx)`, as the pipeline's `latents=` argument holds them.

use tch::Tensor;

/// Packed tokens `[1, h·w, 4·z]` (channels `(c, dy, dx)`) → latents `[1, z, 1, 2h, 2w]`.
pub fn unpack(tokens: &Tensor, h: i64, w: i64) -> Tensor {
    let c = tokens.size()[2] / 4;
    tokens.view([1, h, w, c, 2, 2]).permute([0, 3, 1, 4, 2, 5]).reshape([1, c, 1, 2 * h, 2 * w])
}

/// Latents `[1, z, 1, 2h, 2w]` → packed tokens `[1, h·w, 4·z]`.
pub fn pack(latents: &Tensor) -> Tensor {
    let (_, c, _, h2, w2) = latents.size5().expect("[1, z, 1, H, W]");
    let (h, w) = (h2 / 2, w2 / 2);
    latents.view([1, c, h, 2, w, 2]).permute([0, 2, 4, 1, 3, 5]).reshape([1, h * w, c * 4])
}
