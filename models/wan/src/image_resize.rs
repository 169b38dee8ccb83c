//! Picture resizing as the reference pipelines do it: diffusers' `VaeImageProcessor` stretches a
//! conditioning picture to the output size with PIL's Lanczos filter. This is PIL's algorithm
//! (`Resample.c`: a = 3 Lanczos, support widened by the scale when shrinking, weights normalised
//! per output pixel, the horizontal pass first, each pass rounded to 8 bits), as two matrix
//! products on the CPU.

use anyhow::{ensure, Result};
use tch::{Device, Kind, Tensor};

use fastvideo_request::{reframe, InputImage, ResizeMode};

/// `sinc(x)·sinc(x/3)` on `|x| < 3`.
fn lanczos(x: f64) -> f64 {
    let sinc = |x: f64| if x == 0.0 { 1.0 } else { (std::f64::consts::PI * x).sin() / (std::f64::consts::PI * x) };
    if x.abs() < 3.0 {
        sinc(x) * sinc(x / 3.0)
    } else {
        0.0
    }
}

/// `[out, in]` weights resampling `input` samples to `output` (PIL's `precompute_coeffs`).
fn weights(input: i64, output: i64) -> Tensor {
    let scale = input as f64 / output as f64;
    let filter_scale = scale.max(1.0);
    let support = 3.0 * filter_scale;
    let mut w = vec![0f64; (input * output) as usize];
    for o in 0..output {
        let center = (o as f64 + 0.5) * scale;
        let lo = ((center - support + 0.5) as i64).max(0);
        let hi = ((center + support + 0.5) as i64).min(input);
        let row = &mut w[(o * input) as usize..((o + 1) * input) as usize];
        let mut total = 0.0;
        for i in lo..hi {
            let k = lanczos((i as f64 - center + 0.5) / filter_scale);
            row[i as usize] = k;
            total += k;
        }
        if total != 0.0 {
            row[lo as usize..hi as usize].iter_mut().for_each(|k| *k /= total);
        }
    }
    Tensor::from_slice(&w).view([output, input]).to_kind(Kind::Float)
}

/// Rounds to the 8-bit grid as PIL does between and after its passes.
fn to_u8_grid(x: Tensor) -> Tensor {
    (x + 0.5).floor().clamp(0.0, 255.0)
}

/// A picture fitted to `width`x`height` as `mode` says (`stretch`, diffusers' default, resizes
/// whatever the aspect) → `[1, 3, height, width]` float32 in [-1, 1] on `device`, as the VAE
/// takes it.
pub fn picture_to_unit(
    image: &InputImage,
    mode: ResizeMode,
    width: i64,
    height: i64,
    device: Device,
) -> Result<Tensor> {
    rgb8_to_unit(&image.rgb, image.width, image.height, mode, width, height, device)
}

/// [`picture_to_unit`] for `w`x`h` RGB8 bytes (one video frame, say).
pub fn rgb8_to_unit(
    rgb: &[u8],
    w: u32,
    h: u32,
    mode: ResizeMode,
    width: i64,
    height: i64,
    device: Device,
) -> Result<Tensor> {
    ensure!(rgb.len() as u64 == h as u64 * w as u64 * 3, "image: {w}x{h} RGB8 needs {} bytes", h * w * 3);
    let fitted = reframe(rgb, w, h, width as u32, height as u32, mode);
    stretch_to_unit(&fitted.rgb, fitted.width, fitted.height, width, height, device)
}

/// Lanczos resize of `w`x`h` RGB8 to `width`x`height`, aspect not kept.
fn stretch_to_unit(rgb: &[u8], w: u32, h: u32, width: i64, height: i64, device: Device) -> Result<Tensor> {
    let (h, w) = (h as i64, w as i64);
    ensure!(rgb.len() as i64 == h * w * 3, "image: {w}x{h} RGB8 needs {} bytes", h * w * 3);
    let mut x = Tensor::from_slice(rgb).view([h, w, 3]).permute([2, 0, 1]).to_kind(Kind::Float);
    if w != width {
        x = to_u8_grid(x.matmul(&weights(w, width).tr()));
    }
    if h != height {
        x = to_u8_grid(weights(h, height).matmul(&x));
    }
    Ok((x / 255.0 * 2.0 - 1.0).unsqueeze(0).to_device(device))
}
