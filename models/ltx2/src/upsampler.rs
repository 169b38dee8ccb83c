//! `LTX2LatentUpsamplerModel`: the two-stage recipe's ×2 between its stages, on the VAE's
//! latents `[B, 128, F, H, W]`. Residual conv blocks, an upsampler (a convolution to
//! `scale²` times the channels and a pixel shuffle; the rational variant then blurs and strides
//! back by its denominator), more residual blocks, and a convolution back to the latents'
//! channels.

use std::path::Path;

use anyhow::{bail, Context, Result};
use fastvideo_layers::config::{read_config_with, unsupported};
use fastvideo_torch::weights::Weights;
use serde::Deserialize;
use tch::{Device, Kind, Tensor};

/// `latent_upsampler/config.json`; field names are diffusers'.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct UpsamplerConfig {
    #[serde(default = "d::c128")]
    pub in_channels: i64,
    #[serde(default = "d::c1024")]
    pub mid_channels: i64,
    #[serde(default = "d::four")]
    pub num_blocks_per_stage: usize,
    #[serde(default = "d::three")]
    pub dims: i64,
    #[serde(default = "d::yes")]
    pub spatial_upsample: bool,
    #[serde(default)]
    pub temporal_upsample: bool,
    #[serde(default = "d::two")]
    pub rational_spatial_scale: f64,
    #[serde(default = "d::yes")]
    pub use_rational_resampler: bool,
}

mod d {
    pub fn c128() -> i64 {
        128
    }
    pub fn c1024() -> i64 {
        1024
    }
    pub fn four() -> usize {
        4
    }
    pub fn three() -> i64 {
        3
    }
    pub fn two() -> f64 {
        2.0
    }
    pub fn yes() -> bool {
        true
    }
}

/// A convolution (2-D or 3-D by its weight), kernel 3, padding 1.
struct Conv {
    weight: Tensor,
    bias: Tensor,
}

impl Conv {
    fn new(w: &Weights, input: i64, output: i64, dims: i64) -> Result<Self> {
        let shape: Vec<i64> = [output, input].into_iter().chain(std::iter::repeat_n(3, dims as usize)).collect();
        Ok(Self { weight: w.get("weight", &shape)?, bias: w.get("bias", &[output])? })
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        match self.weight.dim() {
            5 => fastvideo_layers::conv::conv3d(x, &self.weight, &self.bias, [1, 1, 1], [1, 1, 1]),
            _ => x.conv2d(&self.weight, Some(&self.bias), [1, 1], [1, 1], [1, 1], 1),
        }
    }
}

/// `GroupNorm(32, channels)` with its affine parameters.
struct GroupNorm {
    weight: Tensor,
    bias: Tensor,
}

impl GroupNorm {
    fn new(w: &Weights, channels: i64) -> Result<Self> {
        Ok(Self { weight: w.get("weight", &[channels])?, bias: w.get("bias", &[channels])? })
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        x.group_norm(32, Some(&self.weight), Some(&self.bias), 1e-5, false)
    }
}

/// conv → norm → SiLU → conv → norm, added to the input, SiLU.
struct ResBlock {
    conv1: Conv,
    norm1: GroupNorm,
    conv2: Conv,
    norm2: GroupNorm,
}

impl ResBlock {
    fn new(w: &Weights, c: i64, dims: i64) -> Result<Self> {
        Ok(Self {
            conv1: Conv::new(&w.pp("conv1"), c, c, dims)?,
            norm1: GroupNorm::new(&w.pp("norm1"), c)?,
            conv2: Conv::new(&w.pp("conv2"), c, c, dims)?,
            norm2: GroupNorm::new(&w.pp("norm2"), c)?,
        })
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        let h = self.norm1.forward(&self.conv1.forward(x)).silu();
        (self.norm2.forward(&self.conv2.forward(&h)) + x).silu()
    }
}

/// How the middle of the model upsamples.
enum Upsample {
    /// `[B·F, C, H, W]`: conv to `num²·C`, shuffle by `num`, blur and stride by `den`.
    Rational { conv: Conv, num: i64, den: i64, kernel: Tensor },
    /// Conv to `factors·C` and a pixel shuffle of those factors (time, rows, columns); 2-D
    /// when the time factor is absent.
    Shuffle { conv: Conv, factors: Vec<i64> },
}

/// The latent upsampler.
pub struct Ltx2LatentUpsampler {
    /// Its config.
    pub cfg: UpsamplerConfig,
    initial_conv: Conv,
    initial_norm: GroupNorm,
    res_blocks: Vec<ResBlock>,
    upsample: Upsample,
    post_blocks: Vec<ResBlock>,
    final_conv: Conv,
}

// SAFETY: the weights are read-only after construction and libtorch kernels may read one
// tensor from several threads; nothing here mutates shared state.
unsafe impl Sync for Ltx2LatentUpsampler {}

/// `b (c p1 p2 …) d… → b c (d p1) …` over the last `factors.len()` axes.
fn pixel_shuffle(x: &Tensor, factors: &[i64]) -> Tensor {
    let s = x.size();
    let n = factors.len();
    let spatial = &s[s.len() - n..];
    let mut shape = vec![s[0], -1];
    shape.extend_from_slice(factors);
    shape.extend_from_slice(spatial);
    let x = x.reshape(shape.as_slice());
    // [B, C, p.., d..] → [B, C, d0, p0, d1, p1, …]
    let mut order = vec![0i64, 1];
    for i in 0..n as i64 {
        order.push(2 + n as i64 + i);
        order.push(2 + i);
    }
    let x = x.permute(order.as_slice());
    let mut out = vec![s[0], x.size()[1]];
    out.extend(spatial.iter().zip(factors).map(|(d, p)| d * p));
    x.reshape(out.as_slice())
}

impl Ltx2LatentUpsampler {
    /// The dtype its weights are in.
    pub fn kind(&self) -> Kind {
        self.final_conv.weight.kind()
    }

    /// Whether it doubles the latents' rows and columns and keeps their frames (what the
    /// two-stage recipe needs).
    pub fn doubles_space(&self) -> bool {
        let c = &self.cfg;
        c.spatial_upsample && !c.temporal_upsample && (!c.use_rational_resampler || c.rational_spatial_scale == 2.0)
    }

    /// Reads `dir` (`config.json` and the weights) onto `device` in `kind`.
    pub fn load(dir: &Path, device: Device, kind: Kind) -> Result<Self> {
        let path = dir.join("config.json");
        let cfg: UpsamplerConfig = read_config_with(&path, &[])?;
        if cfg.dims != 2 && cfg.dims != 3 {
            return Err(unsupported(&path, "dims", cfg.dims, "2 or 3"));
        }
        if !cfg.spatial_upsample && !cfg.temporal_upsample {
            return Err(unsupported(&path, "spatial_upsample", false, "true, or temporal_upsample true"));
        }
        if cfg.dims == 2 && cfg.temporal_upsample {
            return Err(unsupported(
                &path,
                "temporal_upsample",
                true,
                "false with dims 2 (frames are upsampled one by one)",
            ));
        }
        let w = Weights::from_dir(dir, "diffusion_pytorch_model", device, kind)?;
        let m = Self::new(cfg, &w).with_context(|| format!("{}", dir.display()))?;
        w.warn_unused("latent_upsampler");
        Ok(m)
    }

    /// Builds it from `w`.
    pub fn new(cfg: UpsamplerConfig, w: &Weights) -> Result<Self> {
        let (c, m, dims) = (cfg.in_channels, cfg.mid_channels, cfg.dims);
        let blocks = |name: &str| {
            (0..cfg.num_blocks_per_stage).map(|i| ResBlock::new(&w.pp(name).pp(i), m, dims)).collect::<Result<Vec<_>>>()
        };
        let up = w.pp("upsampler");
        let upsample = match (cfg.spatial_upsample, cfg.temporal_upsample, cfg.use_rational_resampler) {
            (true, true, _) => Upsample::Shuffle { conv: Conv::new(&up.pp("0"), m, 8 * m, 3)?, factors: vec![2, 2, 2] },
            (true, false, true) => {
                const SCALES: [(f64, (i64, i64)); 4] = [(0.75, (3, 4)), (1.5, (3, 2)), (2.0, (2, 1)), (4.0, (4, 1))];
                let s = cfg.rational_spatial_scale;
                let Some(&(_, (num, den))) = SCALES.iter().find(|(k, _)| *k == s) else {
                    bail!("latent upsampler: rational_spatial_scale {s} (0.75, 1.5, 2 or 4)")
                };
                // The binomial blur [1 4 6 4 1]ᵀ[1 4 6 4 1] / 256 (a buffer the checkpoint may carry).
                let k = Tensor::from_slice(&[1.0f32, 4.0, 6.0, 4.0, 1.0]).to_device(w.device());
                let kernel = (k.unsqueeze(1).matmul(&k.unsqueeze(0)) / 256.0).to_kind(w.kind());
                if up.contains("blur_down.kernel") {
                    let _ = up.get("blur_down.kernel", &[1, 1, 5, 5])?;
                }
                Upsample::Rational { conv: Conv::new(&up.pp("conv"), m, num * num * m, 2)?, num, den, kernel }
            }
            (true, false, false) => {
                Upsample::Shuffle { conv: Conv::new(&up.pp("0"), m, 4 * m, 2)?, factors: vec![2, 2] }
            }
            (false, true, _) => Upsample::Shuffle { conv: Conv::new(&up.pp("0"), m, 2 * m, 3)?, factors: vec![2] },
            (false, false, _) => bail!("latent upsampler: neither spatial_upsample nor temporal_upsample"),
        };
        Ok(Self {
            initial_conv: Conv::new(&w.pp("initial_conv"), c, m, dims)?,
            initial_norm: GroupNorm::new(&w.pp("initial_norm"), m)?,
            res_blocks: blocks("res_blocks")?,
            upsample,
            post_blocks: blocks("post_upsample_res_blocks")?,
            final_conv: Conv::new(&w.pp("final_conv"), m, c, dims)?,
            cfg,
        })
    }

    /// `[B, C, F, H, W]` latents → upsampled latents.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let s = x.size();
        anyhow::ensure!(
            s.len() == 5 && s[1] == self.cfg.in_channels,
            "latent upsampler: latents {s:?}, expected [B, {}, F, H, W]",
            self.cfg.in_channels
        );
        let b = s[0];
        let frames = |t: &Tensor| t.permute([0, 2, 1, 3, 4]).flatten(0, 1); // [B·F, C, H, W]
        let unframes = |t: &Tensor| t.unflatten(0, [b, -1]).permute([0, 2, 1, 3, 4]);
        let per_frame = self.cfg.dims == 2;
        let mut h = if per_frame { frames(x) } else { x.shallow_clone() };
        h = self.initial_norm.forward(&self.initial_conv.forward(&h)).silu();
        for blk in &self.res_blocks {
            h = blk.forward(&h);
        }
        h = match &self.upsample {
            Upsample::Rational { conv, num, den, kernel } => {
                let f = if per_frame { h } else { frames(&h) };
                let up = pixel_shuffle(&conv.forward(&f), &[*num, *num]);
                let c = up.size()[1];
                let down = match den {
                    1 => up,
                    _ => {
                        up.conv2d(&kernel.expand([c, 1, 5, 5], false), None::<&Tensor>, [*den, *den], [2, 2], [1, 1], c)
                    }
                };
                if per_frame {
                    down
                } else {
                    unframes(&down)
                }
            }
            Upsample::Shuffle { conv, factors } if factors.len() == 2 && !per_frame => {
                unframes(&pixel_shuffle(&conv.forward(&frames(&h)), factors))
            }
            Upsample::Shuffle { conv, factors } if factors.len() == 1 => {
                // `b (c p) f h w → b c (f p) h w`, then the first frame dropped (the causal
                // VAE's first latent frame is one frame).
                let y = conv.forward(&h);
                let [b, _, f, hh, ww] = y.size()[..] else { unreachable!("3-D latents") };
                let y = y.reshape([b, -1, 2, f, hh, ww]).permute([0, 1, 3, 2, 4, 5]).reshape([b, -1, 2 * f, hh, ww]);
                y.narrow(2, 1, 2 * f - 1)
            }
            Upsample::Shuffle { conv, factors } => {
                let out = pixel_shuffle(&conv.forward(&h), factors);
                // A temporal ×2 drops the first frame (the causal VAE's first latent frame is one frame).
                if factors.len() != 2 {
                    out.narrow(2, 1, out.size()[2] - 1)
                } else {
                    out
                }
            }
        };
        for blk in &self.post_blocks {
            h = blk.forward(&h);
        }
        let out = self.final_conv.forward(&h);
        Ok(if per_frame { unframes(&out) } else { out })
    }
}
