//! `LTX2AudioVideoRotaryPosEmbed`: rotary positions from each token's place in the clip, in
//! seconds and pixels (not in latent cells), so video and audio tokens of the same moment get
//! the same temporal angle and the audio-video attention lines them up.
//!
//! A token's position is the midpoint of the span it covers: a video token covers
//! `vae_scale_factors` pixels and frames (the first latent frame covers one frame, hence the
//! causal offset), its time divided by the frame rate; an audio token covers
//! `audio_scale_factor` mel frames of `hop_length` samples. Positions are divided by the
//! model's base extent (`pos_embed_max_pos` seconds or frames, `base_height`, `base_width`),
//! mapped to [-1, 1], and multiplied by `theta^linspace(0, 1) · π/2`.

use tch::{Device, Kind, Tensor};

use crate::config::RopeType;

/// What one rotary table is built from.
#[derive(Clone, Debug)]
pub struct RopeSpec {
    /// Channels rotated (the attention's width).
    pub dim: i64,
    /// Each position axis's base extent (time first).
    pub max_positions: Vec<f64>,
    /// The frequency base.
    pub theta: f64,
    /// Frequencies computed in float64 before the cast (the reference's `double_precision`).
    pub double_precision: bool,
    /// How channels pair.
    pub rope_type: RopeType,
    /// Heads the split layout groups channels by.
    pub heads: i64,
}

/// A rotary table for one token sequence: `cos`/`sin` `[B, S, dim]` (interleaved) or
/// `[B, H, S, dim / 2H]` (split).
pub struct Rope {
    cos: Tensor,
    sin: Tensor,
    rope_type: RopeType,
    /// The split layout's tables as `[S, dim / 2]` (one batch of positions): what the fused
    /// norm-and-rotate kernel reads (`fastvideo_kernels::rms_norm_rope_split`).
    flat: Option<(Tensor, Tensor)>,
}

/// Midpoints `[1, 3, N]` (frame time in seconds, pixel row, pixel column) of the video tokens of
/// a `[frames, height, width]` latent grid.
pub fn video_positions(grid: [i64; 3], scale: [i64; 3], causal_offset: i64, fps: f64, device: Device) -> Tensor {
    let [f, h, w] = grid;
    let opts = (Kind::Float, device);
    let axis = |n: i64| Tensor::arange(n, opts);
    let mesh = Tensor::meshgrid_indexing(&[axis(f), axis(h), axis(w)], "ij");
    let span = |i: usize, start: &Tensor| -> (Tensor, Tensor) {
        let s = scale[i] as f64;
        (start * s, (start + 1.0) * s)
    };
    let mut axes = Vec::with_capacity(3);
    for (i, m) in mesh.iter().enumerate() {
        let (mut a, mut b) = span(i, &m.flatten(0, -1));
        if i == 0 {
            // The first latent frame covers one frame, not `scale[0]`: shift back and clamp.
            let shift = (causal_offset - scale[0]) as f64;
            a = (a + shift).clamp_min(0.0) / fps;
            b = (b + shift).clamp_min(0.0) / fps;
        }
        axes.push((a + b) / 2.0);
    }
    Tensor::stack(&axes, 0).unsqueeze(0)
}

/// Midpoints `[1, 1, N]` in seconds of `frames` audio latent frames (mel frames of
/// `hop / rate` seconds, `scale` per latent frame).
pub fn audio_positions(frames: i64, scale: i64, causal_offset: i64, hop: i64, rate: i64, device: Device) -> Tensor {
    let g = Tensor::arange(frames, (Kind::Float, device));
    let seconds = |mel: Tensor| (mel + (causal_offset - scale) as f64).clamp_min(0.0) * hop as f64 / rate as f64;
    let start = seconds(&g * scale as f64);
    let end = seconds((&g + 1.0) * scale as f64);
    ((start + end) / 2.0).view([1, 1, frames])
}

impl RopeSpec {
    /// The table for `positions [B or 1, axes, S]` (midpoints, float32).
    pub fn table(&self, positions: &Tensor) -> Rope {
        let device = positions.device();
        let axes = positions.size()[1];
        let grid: Vec<Tensor> = (0..axes).map(|i| positions.select(1, i) / self.max_positions[i as usize]).collect();
        let grid = Tensor::stack(&grid, -1); // [B, S, axes]
        let per_axis = self.dim / (2 * axes);
        let kind = if self.double_precision { Kind::Double } else { Kind::Float };
        let exps = Tensor::linspace(0.0, 1.0, per_axis, (kind, device));
        let freqs = (Tensor::from(self.theta).to_kind(kind).to_device(device).pow(&exps) * std::f64::consts::PI / 2.0)
            .to_kind(Kind::Float);
        // [B, S, axes, F] → [B, S, F, axes] → [B, S, F·axes]: frequency-major.
        let f = (grid.unsqueeze(-1) * 2.0 - 1.0) * freqs;
        let f = f.transpose(-1, -2).flatten(2, -1);
        let (b, s) = (f.size()[0], f.size()[1]);
        match self.rope_type {
            RopeType::Interleaved => {
                let (mut cos, mut sin) =
                    (f.cos().repeat_interleave_self_int(2, -1, None), f.sin().repeat_interleave_self_int(2, -1, None));
                let pad = self.dim % (2 * axes);
                if pad != 0 {
                    cos = Tensor::cat(&[Tensor::ones([b, s, pad], (Kind::Float, device)), cos], -1);
                    sin = Tensor::cat(&[Tensor::zeros([b, s, pad], (Kind::Float, device)), sin], -1);
                }
                Rope { cos, sin, rope_type: RopeType::Interleaved, flat: None }
            }
            RopeType::Split => {
                let pad = self.dim / 2 - f.size()[2];
                let (mut cos, mut sin) = (f.cos(), f.sin());
                if pad != 0 {
                    cos = Tensor::cat(&[Tensor::ones([b, s, pad], (Kind::Float, device)), cos], -1);
                    sin = Tensor::cat(&[Tensor::zeros([b, s, pad], (Kind::Float, device)), sin], -1);
                }
                let flat = (b == 1).then(|| (cos.squeeze_dim(0).contiguous(), sin.squeeze_dim(0).contiguous()));
                let heads = |t: Tensor| t.reshape([b, s, self.heads, -1]).transpose(1, 2);
                Rope { cos: heads(cos), sin: heads(sin), rope_type: RopeType::Split, flat }
            }
        }
    }
}

impl Rope {
    /// `(cos, sin)` `[S, dim / 2]` of the split layout for one batch of positions.
    pub fn split_tables(&self) -> Option<(&Tensor, &Tensor)> {
        self.flat.as_ref().map(|(c, s)| (c, s))
    }

    /// `x [B, S, C]` rotated (float32 arithmetic, the result in `x`'s dtype).
    pub fn apply(&self, x: &Tensor) -> Tensor {
        let kind = x.kind();
        let xf = x.to_kind(Kind::Float);
        match self.rope_type {
            RopeType::Interleaved => {
                let s = x.size();
                let pairs = xf.view([s[0], s[1], -1, 2]);
                let (re, im) = (pairs.select(-1, 0), pairs.select(-1, 1));
                let rotated = Tensor::stack(&[-im, re], -1).flatten(2, -1);
                (xf * &self.cos + rotated * &self.sin).to_kind(kind)
            }
            RopeType::Split => {
                let [b, s, c] = x.size()[..] else { panic!("rope: x must be [B, S, C]") };
                let h = self.cos.size()[1];
                let xh = xf.reshape([b, s, h, c / h]).transpose(1, 2); // [B, H, S, d]
                let halves = xh.chunk(2, -1);
                let (x1, x2) = (&halves[0], &halves[1]);
                let first = x1 * &self.cos - x2 * &self.sin;
                let second = x2 * &self.cos + x1 * &self.sin;
                Tensor::cat(&[first, second], -1).transpose(1, 2).reshape([b, s, c]).to_kind(kind)
            }
        }
    }
}
