//! What both scene rewards share: reading the prompt's words (the default model's vocabulary,
//! `a red circle moving left on a white background`) and the soft object mask, computed with
//! host tensor ops so no pixel enters the sandbox.
//!
//! The ideas are the classical analyzer's (host/procedural `analyze`): the object is what differs
//! from the background colour by more than ~70/255, its colour is the mean of those pixels,
//! its motion the least-squares slope of its centroid. Here the background is the prompt's,
//! the mask is soft (a ramp instead of a threshold) so the score moves smoothly with the
//! video, and every sum is a host op.
#![allow(dead_code)] // each reward uses part of it

use fastvideo_plugin_sdk::{tensor_ops as ops, Tensor};

/// Object colours, as the dataset renders them.
pub const COLORS: &[(&str, [f32; 3])] = &[
    ("red", [220.0, 30.0, 30.0]),
    ("green", [30.0, 180.0, 40.0]),
    ("blue", [40.0, 70.0, 230.0]),
    ("yellow", [240.0, 220.0, 30.0]),
    ("purple", [150.0, 40.0, 190.0]),
    ("orange", [250.0, 140.0, 20.0]),
];

/// Backgrounds, as the dataset renders them.
pub const BACKGROUNDS: &[(&str, [f32; 3])] =
    &[("white", [245.0, 245.0, 245.0]), ("black", [15.0, 15.0, 15.0]), ("gray", [128.0, 128.0, 128.0])];

/// The first word of `prompt` that names an entry of `table`.
pub fn find<'a, T: Copy>(prompt: &str, table: &'a [(&'a str, T)]) -> Option<(&'a str, T)> {
    prompt
        .split(|c: char| !c.is_alphanumeric())
        .find_map(|w| table.iter().find(|(name, _)| name.eq_ignore_ascii_case(w)).copied())
}

/// The background the prompt names (`on a white background`), else an error naming the words
/// it understands.
pub fn background(prompt: &str) -> Result<[f32; 3], String> {
    // Only the word right before "background" names it: "a white circle on a black background".
    let words: Vec<&str> = prompt.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).collect();
    words
        .windows(2)
        .find(|w| w[1].eq_ignore_ascii_case("background"))
        .and_then(|w| find(w[0], BACKGROUNDS))
        .map(|(_, rgb)| rgb)
        .ok_or_else(|| format!("the prompt names no background (one of: {})", names(BACKGROUNDS)))
}

pub fn names<T>(table: &[(&str, T)]) -> String {
    table.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
}

/// An RGB colour (0–255) as a `[3]` tensor in [0, 1] on the video's device.
pub fn rgb(like: &Tensor, c: [f32; 3]) -> Result<Tensor, String> {
    ops::constant(like, &c.map(|v| v / 255.0), &[3])
}

/// Per-pixel distance (RGB, [0, 1] units) from colour `c`: `[F, H, W]`.
pub fn distance(video: &Tensor, c: [f32; 3]) -> Result<Tensor, String> {
    let d = ops::sub(video, &rgb(video, c)?)?;
    ops::norm(&d, 2.0, &[3], false)
}

/// Soft object mask `[F, H, W]`: 0 within 0.22 of the background colour, 1 beyond 0.30 (the
/// analyzer's hard threshold is 70/255 ≈ 0.27), linear between.
pub fn object_mask(video: &Tensor, bg: [f32; 3]) -> Result<Tensor, String> {
    let d = distance(video, bg)?;
    Ok(ops::clamp(&ops::scale(&ops::add_scalar(&d, -0.22), 12.5), 0.0, 1.0))
}

/// `sum(x)` as a number.
pub fn total(x: &Tensor) -> Result<f32, String> {
    ops::item(&ops::sum(x, &[], false)?)
}

/// `[frames, height, width]` of a `[F, H, W, 3]` video, or an error naming the shape.
pub fn dims(video: &Tensor) -> Result<(i64, i64, i64), String> {
    match video.shape().as_slice() {
        [f, h, w, 3] => Ok((*f, *h, *w)),
        s => Err(format!("expected a [frames, height, width, 3] video, got {s:?}")),
    }
}
