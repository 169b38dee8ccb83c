//! Keyframe conditioning, as `LTX2ConditionPipeline` does it: each picture (a request's
//! `keyframe` input) is scaled to cover the loop's size and centre-cropped (bilinear, no
//! antialiasing, on 0..255 pixels), encoded by the video VAE (posterior mode) and normalised
//! without the scaling factor. A picture at latent frame 0 overwrites the first frame's tokens;
//! one at a later latent frame `L` is appended as tokens of its own, placed at pixel frame
//! `(L − 1)·t + 1` for one frame (no causal shift). Every conditioned token has a conditioning
//! mask `m` (its strength, 0 elsewhere): it starts at `(1 − m)·s·noise + (1 − (1 − m)·s)·x`
//! (`s` the noise scale), runs at timestep `t·(1 − m)`, and its clean estimate is blended back
//! toward the picture, `x0·(1 − m) + picture·m`, before each step. The appended tokens count in
//! the schedule's token count and are dropped before decoding. The reference re-compresses
//! single pictures with H.264 first (`crf`); that is not done here (its `crf=0`).

use std::sync::Arc;

use anyhow::{ensure, Result};
use fastvideo_pipeline::{NodeCtx, Stage, Value, Values};
use fastvideo_request::{InputImage, ResolvedRequest};
use tch::{Device, Kind, Tensor};

use crate::latents::{normalize_video, pack_video, Statistics};
use crate::values::KEYFRAME_LATENTS;
use crate::video_encoder::Ltx2VideoEncoder;

/// The picture as the condition pipeline's `preprocess_conditions` makes it: scaled so it
/// covers `height` × `width` (each side `ceil(side · max(height/h, width/w))`), bilinear
/// without antialiasing, centre-cropped, mapped to [-1, 1] — `[1, 3, 1, height, width]`.
pub fn cover_pixels(image: &InputImage, (height, width): (u32, u32), device: Device) -> Result<Tensor> {
    let (w, h) = (image.width as i64, image.height as i64);
    ensure!(image.rgb.len() as i64 == w * h * 3, "keyframe: {} bytes for {w}x{h} RGB", image.rgb.len());
    let scale = (height as f64 / h as f64).max(width as f64 / w as f64);
    let (nh, nw) = ((h as f64 * scale).ceil() as i64, (w as f64 * scale).ceil() as i64);
    let x = Tensor::from_slice(&image.rgb).view([h, w, 3]).to_device(device);
    let x = x.permute([2, 0, 1]).to_kind(Kind::Float).unsqueeze(0);
    let x = x.upsample_bilinear2d([nh, nw], false, None, None);
    let (top, left) = ((nh - height as i64) / 2, (nw - width as i64) / 2);
    let x = x.narrow(2, top, height as i64).narrow(3, left, width as i64);
    Ok((x / 127.5 - 1.0).unsqueeze(2))
}

/// The picture's clean latents `[1, C, 1, h, w]` at `size` (normalised, no scaling factor).
pub fn keyframe_latents(
    encoder: &Ltx2VideoEncoder,
    stats: &Statistics,
    image: &InputImage,
    size: (u32, u32),
    device: Device,
) -> Result<Tensor> {
    let x = cover_pixels(image, size, device)?;
    let z = encoder.encode(&x.to_kind(encoder.kind()))?.to_kind(Kind::Float);
    let (mean, std, _) = &stats.video;
    Ok(normalize_video(&z, &mean.to_device(device), &std.to_device(device), 1.0))
}

/// The latent frame a picture at output `frame` lands on (`t` frames per latent frame): 0 for
/// frame 0, `L` for frame `(L − 1)·t + 1`.
pub fn latent_index(frame: u32, t: i64) -> i64 {
    match frame {
        0 => 0,
        f => (f as i64 - 1) / t + 1,
    }
}

/// The request's keyframes encoded, `[n, C, h, w]` in its order, as `KEYFRAME_LATENTS`.
pub struct EncodeKeyframes {
    /// The video VAE's encoder.
    pub encoder: Arc<Ltx2VideoEncoder>,
    /// Latent statistics.
    pub stats: Arc<Statistics>,
}

impl Stage for EncodeKeyframes {
    fn run(&self, ctx: &NodeCtx, values: &mut Values) -> Result<()> {
        let req = ctx.request;
        let size = (req.height, req.width);
        let z = req
            .keyframes
            .iter()
            .map(|k| Ok(keyframe_latents(&self.encoder, &self.stats, &k.image, size, ctx.device)?.select(2, 0)))
            .collect::<Result<Vec<_>>>()?;
        values.insert(KEYFRAME_LATENTS, Value::Tensor(Tensor::cat(&z, 0)));
        Ok(())
    }
}

/// Whether the request conditions on keyframes.
pub fn has_keyframes(req: &ResolvedRequest) -> bool {
    !req.keyframes.is_empty()
}

/// One picture in latent space: its clean latents `[1, C, h, w]`, its latent frame, its strength.
pub struct Placed {
    /// Clean latents `[1, C, h, w]`.
    pub latents: Tensor,
    /// The latent frame it lands on.
    pub index: i64,
    /// Its conditioning mask value.
    pub strength: f64,
}

/// The request's keyframes placed, from `KEYFRAME_LATENTS` (`t` frames per latent frame).
pub fn placed(req: &ResolvedRequest, latents: &Tensor, t: i64) -> Vec<Placed> {
    (req.keyframes.iter().enumerate())
        .map(|(i, k)| Placed {
            latents: latents.narrow(0, i as i64, 1),
            index: latent_index(k.frame, t),
            strength: k.strength,
        })
        .collect()
}

/// A loop's conditioned video tokens: `[1, N + K, C]` (the grid's `N`, then `K` appended), the
/// conditioning mask `[1, N + K]`, the clean latents (zeros where unconditioned) and the
/// appended tokens' positions `[1, 3, K]` (`None` when nothing is appended).
pub struct Conditioned {
    /// Starting tokens.
    pub video: Tensor,
    /// Conditioning mask.
    pub mask: Tensor,
    /// Clean tokens.
    pub clean: Tensor,
    /// The appended tokens' positions (midpoints: seconds, pixels, pixels).
    pub positions: Option<Tensor>,
}

/// The appended tokens' count for `conds` (those past latent frame 0).
pub fn appended(conds: &[Placed]) -> i64 {
    conds.iter().filter(|c| c.index != 0).map(|c| c.latents.size()[2] * c.latents.size()[3]).sum()
}

/// `prepare_latents` of the condition pipeline: `start` `[1, N, C]` (given latents, normalised,
/// or zeros) with the first-frame pictures written in and the later ones appended, then
/// `noise` `[1, N + K, C]` mixed in by `(1 − m)·noise_scale` (no mixing without noise).
/// `t`, `spatial`: the VAE's frames per latent frame and pixels per latent cell; `fps` the clip's.
pub fn condition(
    start: &Tensor,
    conds: &[Placed],
    noise: Option<(&Tensor, f64)>,
    (t, spatial): (i64, i64),
    fps: f64,
) -> Result<Conditioned> {
    let device = start.device();
    let n = start.size()[1];
    let mut video = start.copy();
    let mut mask = Tensor::zeros([1, n], (Kind::Float, device));
    let mut clean = Tensor::zeros_like(start);
    let (mut tokens, mut masks, mut positions) = (Vec::new(), Vec::new(), Vec::new());
    for c in conds {
        let z = pack_video(&c.latents.unsqueeze(2)).to_device(device);
        let k = z.size()[1];
        match c.index {
            0 => {
                ensure!(k <= n, "keyframe: {k} tokens for a first frame of a {n}-token grid");
                video.narrow(1, 0, k).copy_(&z);
                clean.narrow(1, 0, k).copy_(&z);
                let _ = mask.narrow(1, 0, k).fill_(c.strength);
            }
            index => {
                let (h, w) = (c.latents.size()[2], c.latents.size()[3]);
                tokens.push(z);
                masks.push(Tensor::full([1, k], c.strength, (Kind::Float, device)));
                positions.push(keyframe_positions((index - 1) * t + 1, [h, w], spatial, fps, device));
            }
        }
    }
    if !tokens.is_empty() {
        let extra = Tensor::cat(&tokens, 1);
        video = Tensor::cat(&[video, extra.shallow_clone()], 1);
        clean = Tensor::cat(&[clean, extra], 1);
        mask = Tensor::cat(&[&mask, &Tensor::cat(&masks, 1)], 1);
    }
    if let Some((noise, scale)) = noise {
        ensure!(noise.size() == video.size(), "keyframe: noise {:?} for tokens {:?}", noise.size(), video.size());
        let keep: Tensor = 1.0 - &mask;
        let scaled = (keep * scale).unsqueeze(-1);
        video = noise * &scaled + &video * (1.0 - &scaled);
    }
    let positions = (!positions.is_empty()).then(|| Tensor::cat(&positions, 2));
    Ok(Conditioned { video, mask, clean, positions })
}

/// The positions `[1, 3, h·w]` of a picture's tokens appended at pixel frame `frame`: one frame
/// long (`[frame, frame + 1)` in seconds), the cells' pixel spans, each axis' midpoint.
pub fn keyframe_positions(frame: i64, [h, w]: [i64; 2], spatial: i64, fps: f64, device: Device) -> Tensor {
    let opts = (Kind::Float, device);
    let mesh = Tensor::meshgrid_indexing(&[Tensor::arange(h, opts), Tensor::arange(w, opts)], "ij");
    let mid = |cell: &Tensor| {
        let cell = cell.flatten(0, -1);
        (&cell * spatial as f64 + (&cell + 1.0) * spatial as f64) / 2.0
    };
    let start = Tensor::full([h * w], frame as f64, opts);
    let time = (&start / fps + (&start + 1.0) / fps) / 2.0;
    Tensor::stack(&[time, mid(&mesh[0]), mid(&mesh[1])], 0).unsqueeze(0)
}

/// The clean estimate blended toward the pictures, `x0·(1 − m) + clean·m` (`mask` `[1, N]`).
pub fn blend(x0: &Tensor, mask: &Tensor, clean: &Tensor) -> Tensor {
    let m = mask.unsqueeze(-1);
    x0 * (1.0 - &m) + clean * &m
}

/// What a loop keeps of its keyframes: the mask, the clean tokens, every token's positions
/// (the grid's, then the appended ones'; `None` when nothing is appended) and the grid's
/// token count (what decodes).
pub struct Keyed {
    /// `[1, N + K]`.
    pub mask: Tensor,
    /// `[1, N + K, C]`.
    pub clean: Tensor,
    /// `[1, 3, N + K]`.
    pub positions: Option<Tensor>,
    /// `N`.
    pub tokens: i64,
}

/// The keyframe loop's start: [`condition`], and every token's positions — the grid's
/// (`scale`, `causal_offset`: the transformer's) then the appended ones.
pub fn keyed_start(
    start: &Tensor,
    conds: &[Placed],
    noise: Option<(&Tensor, f64)>,
    grid: [i64; 3],
    vae: (i64, i64),
    (scale, causal_offset): ([i64; 3], i64),
    fps: f64,
) -> Result<(Tensor, Keyed)> {
    let c = condition(start, conds, noise, vae, fps)?;
    let positions = c.positions.map(|p| {
        let grid = crate::rope::video_positions(grid, scale, causal_offset, fps, start.device());
        Tensor::cat(&[grid, p], 2)
    });
    let tokens = start.size()[1];
    Ok((c.video, Keyed { mask: c.mask, clean: c.clean, positions, tokens }))
}
