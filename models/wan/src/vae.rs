//! `AutoencoderKLWan` (diffusers `models/autoencoders/autoencoder_kl_wan.py`, the Wan 2.1 VAE):
//! causal 3-D convolutions with a chunked feature cache, so video is encoded as the first frame
//! then chunks of 4 and decoded one latent frame at a time while the convolutions still see the
//! two previous frames. Compression is 4x in time (`4k+1` frames → `k+1`) and 8x in space.

use std::path::Path;

use anyhow::{ensure, Result};
use serde::Deserialize;
use tch::{Kind, Tensor};

use crate::config::{read_config_with, unsupported};
use crate::weights::Weights;

/// Frames of history each causal conv keeps between chunks (`CACHE_T` upstream).
const CACHE_T: i64 = 2;

/// `vae/config.json`. Defaults are diffusers' class defaults (the Wan 2.1 VAE).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct VaeConfig {
    pub base_dim: i64,
    pub decoder_base_dim: Option<i64>,
    pub z_dim: i64,
    pub dim_mult: Vec<i64>,
    pub num_res_blocks: i64,
    pub attn_scales: Vec<f64>,
    pub temperal_downsample: Vec<bool>,
    pub dropout: f64,
    pub latents_mean: Vec<f64>,
    pub latents_std: Vec<f64>,
    pub is_residual: bool,
    pub in_channels: i64,
    pub out_channels: i64,
    pub patch_size: Option<i64>,
    pub scale_factor_temporal: Option<i64>,
    pub scale_factor_spatial: Option<i64>,
}

impl Default for VaeConfig {
    fn default() -> Self {
        Self {
            base_dim: 96,
            decoder_base_dim: None,
            z_dim: 16,
            dim_mult: vec![1, 2, 4, 4],
            num_res_blocks: 2,
            attn_scales: vec![],
            temperal_downsample: vec![false, true, true],
            dropout: 0.0,
            latents_mean: vec![],
            latents_std: vec![],
            is_residual: false,
            in_channels: 3,
            out_channels: 3,
            patch_size: None,
            scale_factor_temporal: Some(4),
            scale_factor_spatial: Some(8),
        }
    }
}

impl VaeConfig {
    pub fn load(path: &Path) -> Result<Self> {
        // `clip_output` was in an unreleased diffusers; released ones ignore it and always clamp.
        let cfg: Self = read_config_with(path, &[&["clip_output"]])?;
        if cfg.is_residual {
            return Err(unsupported(path, "is_residual", true, "the Wan 2.2 residual VAE is not implemented"));
        }
        if let Some(p) = cfg.patch_size {
            return Err(unsupported(path, "patch_size", p, "use null"));
        }
        let levels = cfg.dim_mult.len();
        ensure!(
            levels >= 1 && cfg.temperal_downsample.len() + 1 == levels,
            "{}: temperal_downsample needs {} entries for dim_mult {:?}",
            path.display(),
            levels - 1,
            cfg.dim_mult
        );
        let t = 1i64 << cfg.temperal_downsample.iter().filter(|&&b| b).count();
        let s = 1i64 << (levels - 1);
        if cfg.scale_factor_temporal.is_some_and(|v| v != t) {
            return Err(unsupported(
                path,
                "scale_factor_temporal",
                cfg.scale_factor_temporal.unwrap(),
                &format!("the layers give {t}"),
            ));
        }
        if cfg.scale_factor_spatial.is_some_and(|v| v != s) {
            return Err(unsupported(
                path,
                "scale_factor_spatial",
                cfg.scale_factor_spatial.unwrap(),
                &format!("the layers give {s}"),
            ));
        }
        for (k, v) in [("latents_mean", &cfg.latents_mean), ("latents_std", &cfg.latents_std)] {
            ensure!(
                v.len() as i64 == cfg.z_dim,
                "{}: `{k}` has {} values, z_dim is {}",
                path.display(),
                v.len(),
                cfg.z_dim
            );
        }
        Ok(cfg)
    }
    pub fn temporal_factor(&self) -> i64 {
        1 << self.temperal_downsample.iter().filter(|&&b| b).count()
    }
    pub fn spatial_factor(&self) -> i64 {
        1 << (self.dim_mult.len() - 1)
    }
}

/// One cache slot per causal conv call site, visited in the same order every chunk.
enum Slot {
    Empty,
    /// The upsampler's "first chunk, nothing to repeat yet" marker (`"Rep"` upstream).
    Rep,
    Frames(Tensor),
}

#[derive(Default)]
struct FeatCache {
    slots: Vec<Slot>,
    idx: usize,
}

impl FeatCache {
    fn rewind(&mut self) {
        self.idx = 0;
    }
    fn next(&mut self) -> &mut Slot {
        if self.idx == self.slots.len() {
            self.slots.push(Slot::Empty);
        }
        self.idx += 1;
        &mut self.slots[self.idx - 1]
    }
}

/// Last `CACHE_T` frames of `x`, padded in front with the last cached frame when `x` is short.
fn frames_to_cache(x: &Tensor, prev: &Slot) -> Tensor {
    let t = x.size()[2];
    let n = t.min(CACHE_T);
    let tail = x.narrow(2, t - n, n).copy();
    match prev {
        Slot::Frames(p) if n < CACHE_T => {
            let pt = p.size()[2];
            Tensor::cat(&[p.narrow(2, pt - 1, 1), tail], 2)
        }
        _ => tail,
    }
}

struct CausalConv3d {
    weight: Tensor,
    bias: Tensor,
    stride: [i64; 3],
    /// Padding (time, height, width); time padding is applied causally (all in front, doubled).
    pad: [i64; 3],
}

impl CausalConv3d {
    fn new(w: &Weights, cin: i64, cout: i64, k: [i64; 3], stride: [i64; 3], pad: [i64; 3]) -> Result<Self> {
        Ok(Self {
            weight: w.get("weight", &[cout, cin, k[0], k[1], k[2]])?,
            bias: w.get("bias", &[cout])?,
            stride,
            pad,
        })
    }
    fn cube(w: &Weights, cin: i64, cout: i64) -> Result<Self> {
        Self::new(w, cin, cout, [3, 3, 3], [1, 1, 1], [1, 1, 1])
    }
    fn pointwise(w: &Weights, cin: i64, cout: i64) -> Result<Self> {
        Self::new(w, cin, cout, [1, 1, 1], [1, 1, 1], [0, 0, 0])
    }

    fn forward(&self, x: &Tensor, cache: Option<&Tensor>) -> Tensor {
        let mut time_pad = 2 * self.pad[0];
        let x = match cache {
            Some(c) if time_pad > 0 => {
                time_pad -= c.size()[2];
                Tensor::cat(&[c, x], 2)
            }
            _ => x.shallow_clone(),
        };
        // Zero frames in front for causality; the spatial zeros come from the conv's own padding.
        let x = if time_pad > 0 { x.constant_pad_nd([0, 0, 0, 0, time_pad, 0]) } else { x };
        let [_, ph, pw] = self.pad;
        crate::nn::conv3d(&x, &self.weight, &self.bias, self.stride, [0, ph, pw])
    }

    /// Forward through the feature cache: remember this input's tail for the next chunk.
    fn cached(&self, x: &Tensor, cache: &mut FeatCache) -> Tensor {
        let slot = cache.next();
        let keep = frames_to_cache(x, slot);
        let out = self.forward(x, if let Slot::Frames(c) = slot { Some(c) } else { None });
        *slot = Slot::Frames(keep);
        out
    }
}

/// `WanRMS_norm`: L2-normalize over channels, times `sqrt(C) * gamma`.
struct RmsNorm {
    /// `sqrt(C) * gamma`, folded once at load.
    gain: Tensor,
}

impl RmsNorm {
    /// `rank` is 5 for video activations, 4 for the per-frame attention.
    fn new(w: &Weights, dim: i64, rank: usize) -> Result<Self> {
        let mut shape = vec![dim];
        shape.resize(rank - 1, 1);
        Ok(Self { gain: w.get("gamma", &shape)? * (dim as f64).sqrt() })
    }
    /// `x / max(|x|, 1e-12)` as `x * rsqrt(max(sum x², 1e-24))`: the same value, and libtorch's
    /// `norm` over the strided channel axis is ~20× slower on the CPU than a squared sum there.
    /// Half-precision inputs are normalised in float32 and cast back, as diffusers ≥ 0.38 does.
    fn forward(&self, x: &Tensor) -> Tensor {
        let kind = x.kind();
        let xf = if matches!(kind, Kind::BFloat16 | Kind::Half) { x.to_kind(Kind::Float) } else { x.shallow_clone() };
        let inv = xf.square().sum_dim_intlist([1i64].as_slice(), true, None::<Kind>).clamp_min(1e-24).rsqrt();
        (xf * inv).to_kind(kind) * &self.gain
    }
}

struct ResidualBlock {
    norm1: RmsNorm,
    conv1: CausalConv3d,
    norm2: RmsNorm,
    conv2: CausalConv3d,
    shortcut: Option<CausalConv3d>,
}

impl ResidualBlock {
    fn new(w: &Weights, cin: i64, cout: i64) -> Result<Self> {
        Ok(Self {
            norm1: RmsNorm::new(&w.pp("norm1"), cin, 5)?,
            conv1: CausalConv3d::cube(&w.pp("conv1"), cin, cout)?,
            norm2: RmsNorm::new(&w.pp("norm2"), cout, 5)?,
            conv2: CausalConv3d::cube(&w.pp("conv2"), cout, cout)?,
            shortcut: if cin != cout {
                Some(CausalConv3d::pointwise(&w.pp("conv_shortcut"), cin, cout)?)
            } else {
                None
            },
        })
    }
    fn forward(&self, x: &Tensor, cache: &mut FeatCache) -> Tensor {
        let h = match &self.shortcut {
            Some(s) => s.forward(x, None),
            None => x.shallow_clone(),
        };
        let x = self.conv1.cached(&self.norm1.forward(x).silu(), cache);
        let x = self.conv2.cached(&self.norm2.forward(&x).silu(), cache);
        x + h
    }
}

/// Single-head self-attention over the pixels of each frame.
struct AttentionBlock {
    norm: RmsNorm,
    qkv_w: Tensor,
    qkv_b: Tensor,
    proj_w: Tensor,
    proj_b: Tensor,
}

impl AttentionBlock {
    fn new(w: &Weights, dim: i64) -> Result<Self> {
        Ok(Self {
            norm: RmsNorm::new(&w.pp("norm"), dim, 4)?,
            qkv_w: w.get("to_qkv.weight", &[3 * dim, dim, 1, 1])?,
            qkv_b: w.get("to_qkv.bias", &[3 * dim])?,
            proj_w: w.get("proj.weight", &[dim, dim, 1, 1])?,
            proj_b: w.get("proj.bias", &[dim])?,
        })
    }
    fn forward(&self, x: &Tensor) -> Tensor {
        let (b, c, t, h, w) = x.size5().expect("video activations");
        let f = x.permute([0, 2, 1, 3, 4]).reshape([b * t, c, h, w]);
        let qkv = self.norm.forward(&f).conv2d(&self.qkv_w, Some(&self.qkv_b), [1, 1], [0, 0], [1, 1], 1);
        let qkv = qkv.reshape([b * t, 1, 3 * c, h * w]).permute([0, 1, 3, 2]).contiguous();
        let parts = qkv.chunk(3, -1);
        let o = Tensor::scaled_dot_product_attention(
            &parts[0],
            &parts[1],
            &parts[2],
            None::<Tensor>,
            0.0,
            false,
            None,
            false,
        );
        let o = o.squeeze_dim(1).permute([0, 2, 1]).reshape([b * t, c, h, w]);
        let o = o.conv2d(&self.proj_w, Some(&self.proj_b), [1, 1], [0, 0], [1, 1], 1);
        o.view([b, t, c, h, w]).permute([0, 2, 1, 3, 4]) + x
    }
}

#[derive(Clone, Copy, PartialEq)]
enum ResampleMode {
    Up2d,
    Up3d,
    Down2d,
    Down3d,
}

struct Resample {
    mode: ResampleMode,
    conv_w: Tensor,
    conv_b: Tensor,
    time_conv: Option<CausalConv3d>,
}

impl Resample {
    fn new(w: &Weights, dim: i64, mode: ResampleMode) -> Result<Self> {
        let (cout, time_conv) = match mode {
            ResampleMode::Up2d => (dim / 2, None),
            ResampleMode::Up3d => {
                (dim / 2, Some(CausalConv3d::new(&w.pp("time_conv"), dim, 2 * dim, [3, 1, 1], [1, 1, 1], [1, 0, 0])?))
            }
            ResampleMode::Down2d => (dim, None),
            ResampleMode::Down3d => {
                (dim, Some(CausalConv3d::new(&w.pp("time_conv"), dim, dim, [3, 1, 1], [2, 1, 1], [0, 0, 0])?))
            }
        };
        Ok(Self {
            mode,
            conv_w: w.get("resample.1.weight", &[cout, dim, 3, 3])?,
            conv_b: w.get("resample.1.bias", &[cout])?,
            time_conv,
        })
    }

    fn forward(&self, x: &Tensor, cache: &mut FeatCache) -> Tensor {
        let mut x = x.shallow_clone();
        if self.mode == ResampleMode::Up3d {
            x = self.time_upsample(&x, cache);
        }
        let (b, c, t, h, w) = x.size5().expect("video activations");
        let frames = x.permute([0, 2, 1, 3, 4]).reshape([b * t, c, h, w]);
        let frames = match self.mode {
            ResampleMode::Up2d | ResampleMode::Up3d => frames.upsample_nearest2d([2 * h, 2 * w], None, None).conv2d(
                &self.conv_w,
                Some(&self.conv_b),
                [1, 1],
                [1, 1],
                [1, 1],
                1,
            ),
            ResampleMode::Down2d | ResampleMode::Down3d => {
                frames.constant_pad_nd([0, 1, 0, 1]).conv2d(&self.conv_w, Some(&self.conv_b), [2, 2], [0, 0], [1, 1], 1)
            }
        };
        let (_, c2, h2, w2) = frames.size4().expect("frames");
        let mut x = frames.view([b, t, c2, h2, w2]).permute([0, 2, 1, 3, 4]);
        if self.mode == ResampleMode::Down3d {
            x = self.time_downsample(&x, cache);
        }
        x
    }

    /// Doubles the frame count, except on the very first chunk (which holds the lone first frame).
    fn time_upsample(&self, x: &Tensor, cache: &mut FeatCache) -> Tensor {
        let conv = self.time_conv.as_ref().expect("upsample3d has a time conv");
        let slot = cache.next();
        if matches!(slot, Slot::Empty) {
            *slot = Slot::Rep;
            return x.shallow_clone();
        }
        let (b, c, t, h, w) = x.size5().expect("video activations");
        let mut keep = frames_to_cache(x, slot);
        if matches!(slot, Slot::Rep) && keep.size()[2] < CACHE_T {
            keep = Tensor::cat(&[keep.zeros_like(), keep], 2);
        }
        let out = conv.forward(x, if let Slot::Frames(c) = slot { Some(c) } else { None });
        *slot = Slot::Frames(keep);
        let out = out.reshape([b, 2, c, t, h, w]);
        Tensor::stack(&[out.select(1, 0), out.select(1, 1)], 3).reshape([b, c, 2 * t, h, w])
    }

    /// Halves the frame count with a stride-2 conv over [last cached frame, chunk].
    fn time_downsample(&self, x: &Tensor, cache: &mut FeatCache) -> Tensor {
        let conv = self.time_conv.as_ref().expect("downsample3d has a time conv");
        let slot = cache.next();
        let t = x.size()[2];
        match slot {
            Slot::Frames(prev) => {
                let pt = prev.size()[2];
                let input = Tensor::cat(&[prev.narrow(2, pt - 1, 1), x.shallow_clone()], 2);
                let out = conv.forward(&input, None);
                *slot = Slot::Frames(x.narrow(2, t - 1, 1).copy());
                out
            }
            _ => {
                *slot = Slot::Frames(x.copy());
                x.shallow_clone()
            }
        }
    }
}

enum Layer {
    Res(ResidualBlock),
    Attn(AttentionBlock),
    Resample(Resample),
}

impl Layer {
    fn forward(&self, x: &Tensor, cache: &mut FeatCache) -> Tensor {
        match self {
            Layer::Res(r) => r.forward(x, cache),
            Layer::Attn(a) => a.forward(x),
            Layer::Resample(r) => r.forward(x, cache),
        }
    }
}

fn run(layers: &[Layer], mut x: Tensor, cache: &mut FeatCache) -> Tensor {
    for l in layers {
        x = l.forward(&x, cache);
    }
    x
}

/// resnet, attention, resnet.
fn mid_block(w: &Weights, dim: i64) -> Result<Vec<Layer>> {
    Ok(vec![
        Layer::Res(ResidualBlock::new(&w.pp("resnets.0"), dim, dim)?),
        Layer::Attn(AttentionBlock::new(&w.pp("attentions.0"), dim)?),
        Layer::Res(ResidualBlock::new(&w.pp("resnets.1"), dim, dim)?),
    ])
}

struct Coder {
    conv_in: CausalConv3d,
    body: Vec<Layer>,
    norm_out: RmsNorm,
    conv_out: CausalConv3d,
}

impl Coder {
    fn forward(&self, x: &Tensor, cache: &mut FeatCache) -> Tensor {
        cache.rewind();
        let x = self.conv_in.cached(x, cache);
        let x = run(&self.body, x, cache);
        self.conv_out.cached(&self.norm_out.forward(&x).silu(), cache)
    }
}

fn encoder(w: &Weights, cfg: &VaeConfig) -> Result<Coder> {
    let dims: Vec<i64> = std::iter::once(1).chain(cfg.dim_mult.iter().copied()).map(|m| cfg.base_dim * m).collect();
    let mut body = Vec::new();
    let mut scale = 1.0;
    let levels = cfg.dim_mult.len();
    for i in 0..levels {
        let (mut cin, cout) = (dims[i], dims[i + 1]);
        for _ in 0..cfg.num_res_blocks {
            body.push(Layer::Res(ResidualBlock::new(&w.pp("down_blocks").pp(body.len()), cin, cout)?));
            if cfg.attn_scales.contains(&scale) {
                body.push(Layer::Attn(AttentionBlock::new(&w.pp("down_blocks").pp(body.len()), cout)?));
            }
            cin = cout;
        }
        if i != levels - 1 {
            let mode = if cfg.temperal_downsample[i] { ResampleMode::Down3d } else { ResampleMode::Down2d };
            body.push(Layer::Resample(Resample::new(&w.pp("down_blocks").pp(body.len()), cout, mode)?));
            scale /= 2.0;
        }
    }
    let top = dims[levels];
    body.extend(mid_block(&w.pp("mid_block"), top)?);
    Ok(Coder {
        conv_in: CausalConv3d::cube(&w.pp("conv_in"), cfg.in_channels, dims[0])?,
        body,
        norm_out: RmsNorm::new(&w.pp("norm_out"), top, 5)?,
        conv_out: CausalConv3d::cube(&w.pp("conv_out"), top, 2 * cfg.z_dim)?,
    })
}

fn decoder(w: &Weights, cfg: &VaeConfig) -> Result<Coder> {
    let base = cfg.decoder_base_dim.unwrap_or(cfg.base_dim);
    let last = *cfg.dim_mult.last().expect("validated non-empty");
    let dims: Vec<i64> = std::iter::once(last).chain(cfg.dim_mult.iter().rev().copied()).map(|m| base * m).collect();
    let upsample: Vec<bool> = cfg.temperal_downsample.iter().rev().copied().collect();
    let levels = cfg.dim_mult.len();
    let mut body = mid_block(&w.pp("mid_block"), dims[0])?;
    for i in 0..levels {
        // Wan 2.1: every upsampler halves the channels, so later blocks start at half width.
        let (mut cin, cout) = (if i > 0 { dims[i] / 2 } else { dims[i] }, dims[i + 1]);
        let bw = w.pp("up_blocks").pp(i);
        for j in 0..=cfg.num_res_blocks {
            body.push(Layer::Res(ResidualBlock::new(&bw.pp("resnets").pp(j), cin, cout)?));
            cin = cout;
        }
        if i != levels - 1 {
            let mode = if upsample[i] { ResampleMode::Up3d } else { ResampleMode::Up2d };
            body.push(Layer::Resample(Resample::new(&bw.pp("upsamplers.0"), cout, mode)?));
        }
    }
    let out_dim = dims[levels];
    Ok(Coder {
        conv_in: CausalConv3d::cube(&w.pp("conv_in"), cfg.z_dim, dims[0])?,
        body,
        norm_out: RmsNorm::new(&w.pp("norm_out"), out_dim, 5)?,
        conv_out: CausalConv3d::cube(&w.pp("conv_out"), out_dim, cfg.out_channels)?,
    })
}

/// The Wan 2.1 video VAE.
pub struct AutoencoderKLWan {
    pub cfg: VaeConfig,
    encoder: Coder,
    quant_conv: CausalConv3d,
    post_quant_conv: CausalConv3d,
    decoder: Coder,
    /// The compute dtype (weights were converted to it at load); inputs are cast to it and
    /// outputs come back in float32.
    kind: Kind,
}

/// The causal decoder's cache between the latent frames of one stream (a world-model session).
#[derive(Default)]
pub struct DecodeStream {
    cache: FeatCache,
}

// SAFETY: weights are written once in `new` and only read afterwards; the feature cache is
// per call, never stored in `self`.
unsafe impl Sync for AutoencoderKLWan {}

impl AutoencoderKLWan {
    pub fn new(cfg: VaeConfig, w: &Weights) -> Result<Self> {
        let z = cfg.z_dim;
        Ok(Self {
            encoder: encoder(&w.pp("encoder"), &cfg)?,
            quant_conv: CausalConv3d::pointwise(&w.pp("quant_conv"), 2 * z, 2 * z)?,
            post_quant_conv: CausalConv3d::pointwise(&w.pp("post_quant_conv"), z, z)?,
            decoder: decoder(&w.pp("decoder"), &cfg)?,
            kind: w.kind(),
            cfg,
        })
    }

    /// Video `[B, 3, 4k+1, H, W]` in [-1, 1] → posterior parameters `[B, 2*z, k+1, H/8, W/8]`
    /// (mean, then log-variance), encoding the first frame and then chunks of 4.
    pub fn encode_params(&self, video: &Tensor) -> Result<Tensor> {
        let s = video.size();
        let (tf, sf) = (self.cfg.temporal_factor(), self.cfg.spatial_factor());
        ensure!(
            s.len() == 5 && s[1] == self.cfg.in_channels && (s[2] - 1) % tf == 0 && s[3] % sf == 0 && s[4] % sf == 0,
            "vae encode: video {s:?} must be [B, {}, {tf}k+1, H, W] with H and W multiples of {sf}",
            self.cfg.in_channels
        );
        let video = video.to_kind(self.kind);
        let mut cache = FeatCache::default();
        let mut outs = vec![self.encoder.forward(&video.narrow(2, 0, 1), &mut cache)];
        for i in 0..(s[2] - 1) / tf {
            outs.push(self.encoder.forward(&video.narrow(2, 1 + tf * i, tf), &mut cache));
        }
        Ok(self.quant_conv.forward(&Tensor::cat(&outs, 2), None).to_kind(Kind::Float))
    }

    /// The posterior mean (diffusers `latent_dist.mode()`).
    pub fn encode(&self, video: &Tensor) -> Result<Tensor> {
        Ok(self.encode_params(video)?.narrow(1, 0, self.cfg.z_dim))
    }

    /// Latents `[B, z, k+1, h, w]` → video `[B, 3, 4k+1, 8h, 8w]` clamped to [-1, 1], one latent
    /// frame per decoder pass.
    pub fn decode(&self, z: &Tensor) -> Result<Tensor> {
        let s = z.size();
        ensure!(
            s.len() == 5 && s[1] == self.cfg.z_dim,
            "vae decode: latents {s:?} must be [B, {}, F, H, W]",
            self.cfg.z_dim
        );
        let x = self.post_quant_conv.forward(&z.to_kind(self.kind), None);
        let mut cache = FeatCache::default();
        // Each decoded chunk is clamped and moved to float32 as it comes, so only one chunk's
        // activations in the compute dtype are alive at a time.
        let outs: Vec<Tensor> = (0..s[2])
            .map(|i| self.decoder.forward(&x.narrow(2, i, 1), &mut cache).to_kind(Kind::Float).clamp(-1.0, 1.0))
            .collect();
        Ok(Tensor::cat(&outs, 2))
    }

    /// Decodes the next latent frame of a stream (`z [B, z, 1, h, w]`, denormalized) with the
    /// causal cache `stream` carries from the frames before it: the first call gives one video
    /// frame, each later one `temporal_factor` frames, exactly the frames [`decode`](Self::decode)
    /// of the whole sequence would give there.
    pub fn decode_next(&self, stream: &mut DecodeStream, z: &Tensor) -> Result<Tensor> {
        let s = z.size();
        ensure!(
            s.len() == 5 && s[1] == self.cfg.z_dim && s[2] == 1,
            "vae decode: latent frame {s:?} must be [B, {}, 1, H, W]",
            self.cfg.z_dim
        );
        let x = self.post_quant_conv.forward(&z.to_kind(self.kind), None);
        Ok(self.decoder.forward(&x, &mut stream.cache).to_kind(Kind::Float).clamp(-1.0, 1.0))
    }

    /// Undoes the per-channel latent normalization the transformer was trained on
    /// (`latents * std + mean`), ready for [`decode`](Self::decode).
    pub fn denormalize(&self, latents: &Tensor) -> Tensor {
        let (mean, std) = self.stats(latents);
        latents * std + mean
    }

    /// Normalizes encoder output for the transformer (`(mean - m) / std`).
    pub fn normalize(&self, latents: &Tensor) -> Tensor {
        let (mean, std) = self.stats(latents);
        (latents - mean) / std
    }

    fn stats(&self, like: &Tensor) -> (Tensor, Tensor) {
        let z = self.cfg.z_dim;
        let opts = (like.kind(), like.device());
        let mean = Tensor::from_slice(&self.cfg.latents_mean).view([1, z, 1, 1, 1]).to_kind(opts.0).to_device(opts.1);
        let std = Tensor::from_slice(&self.cfg.latents_std).view([1, z, 1, 1, 1]).to_kind(opts.0).to_device(opts.1);
        (mean, std)
    }
}
