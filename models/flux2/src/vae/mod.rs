//! `AutoencoderKLFlux2`: the 2-D KL autoencoder (diffusers' `Encoder`/`Decoder`, quant convs)
//! and the BatchNorm statistics the pipeline normalises 2×2-patchified latents with.

mod blocks;

use std::path::Path;

use anyhow::Result;
use fastvideo_torch::weights::Weights;
use tch::{Device, Kind, Tensor};

use crate::config::VaeConfig;
use blocks::{Conv2d, Downsample, GroupNorm, MidBlock, Resnet, Upsample};

struct Level {
    resnets: Vec<Resnet>,
    sampler: Option<Sampler>,
}

enum Sampler {
    Down(Downsample),
    Up(Upsample),
}

impl Level {
    fn forward(&self, x: &Tensor) -> Tensor {
        let mut h = x.shallow_clone();
        for r in &self.resnets {
            h = r.forward(&h);
        }
        match &self.sampler {
            Some(Sampler::Down(d)) => d.forward(&h),
            Some(Sampler::Up(u)) => u.forward(&h),
            None => h,
        }
    }
}

/// One side of the autoencoder: `conv_in`, the levels, the mid block, `conv_norm_out`,
/// `conv_out` (the mid block comes after the levels when encoding, before them when decoding).
struct Coder {
    conv_in: Conv2d,
    levels: Vec<Level>,
    mid: MidBlock,
    norm_out: GroupNorm,
    conv_out: Conv2d,
    encoder: bool,
}

impl Coder {
    fn encoder(w: &Weights, c: &VaeConfig) -> Result<Self> {
        let ch = &c.block_out_channels;
        let g = c.norm_num_groups;
        let mut levels = Vec::new();
        for (i, &out) in ch.iter().enumerate() {
            let b = w.pp(format!("down_blocks.{i}"));
            let cin = if i == 0 { ch[0] } else { ch[i - 1] };
            let resnets = (0..c.layers_per_block)
                .map(|j| Resnet::new(&b.pp(format!("resnets.{j}")), g, if j == 0 { cin } else { out }, out))
                .collect::<Result<_>>()?;
            let sampler = match i + 1 < ch.len() {
                true => Some(Sampler::Down(Downsample::new(&b.pp("downsamplers.0"), out)?)),
                false => None,
            };
            levels.push(Level { resnets, sampler });
        }
        let top = *ch.last().expect("checked non-empty");
        Ok(Self {
            conv_in: Conv2d::new(&w.pp("conv_in"), c.in_channels, ch[0], 3, 1, 1)?,
            levels,
            mid: MidBlock::new(&w.pp("mid_block"), g, top, c.mid_block_add_attention)?,
            norm_out: GroupNorm::new(&w.pp("conv_norm_out"), g, top)?,
            conv_out: Conv2d::new(&w.pp("conv_out"), top, 2 * c.latent_channels, 3, 1, 1)?,
            encoder: true,
        })
    }

    fn decoder(w: &Weights, c: &VaeConfig) -> Result<Self> {
        let rev: Vec<i64> = c.decoder_channels().iter().rev().copied().collect();
        let g = c.norm_num_groups;
        let mut levels = Vec::new();
        for (i, &out) in rev.iter().enumerate() {
            let b = w.pp(format!("up_blocks.{i}"));
            let cin = if i == 0 { rev[0] } else { rev[i - 1] };
            let resnets = (0..=c.layers_per_block)
                .map(|j| Resnet::new(&b.pp(format!("resnets.{j}")), g, if j == 0 { cin } else { out }, out))
                .collect::<Result<_>>()?;
            let sampler = match i + 1 < rev.len() {
                true => Some(Sampler::Up(Upsample::new(&b.pp("upsamplers.0"), out)?)),
                false => None,
            };
            levels.push(Level { resnets, sampler });
        }
        let bottom = *rev.last().expect("checked non-empty");
        Ok(Self {
            conv_in: Conv2d::new(&w.pp("conv_in"), c.latent_channels, rev[0], 3, 1, 1)?,
            levels,
            mid: MidBlock::new(&w.pp("mid_block"), g, rev[0], c.mid_block_add_attention)?,
            norm_out: GroupNorm::new(&w.pp("conv_norm_out"), g, bottom)?,
            conv_out: Conv2d::new(&w.pp("conv_out"), bottom, c.out_channels, 3, 1, 1)?,
            encoder: false,
        })
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        let mut h = self.conv_in.forward(x);
        if !self.encoder {
            h = self.mid.forward(&h);
        }
        for level in &self.levels {
            h = level.forward(&h);
        }
        if self.encoder {
            h = self.mid.forward(&h);
        }
        self.conv_out.forward(&self.norm_out.forward(&h).silu())
    }
}

/// The FLUX.2 autoencoder.
pub struct Flux2Vae {
    /// Its config.
    pub cfg: VaeConfig,
    encoder: Coder,
    decoder: Coder,
    quant_conv: Option<Conv2d>,
    post_quant_conv: Option<Conv2d>,
    /// `bn.running_mean` `[4·latent]`, float32.
    bn_mean: Tensor,
    /// `sqrt(bn.running_var + eps)` `[4·latent]`, float32.
    bn_std: Tensor,
    kind: Kind,
}

// SAFETY: read-only weights after loading (as the transformer).
unsafe impl Sync for Flux2Vae {}

impl Flux2Vae {
    /// Loads `dir` (`config.json`, `diffusion_pytorch_model.safetensors`) onto `device` in `kind`.
    pub fn load(dir: &Path, device: Device, kind: Kind) -> Result<Self> {
        let cfg = VaeConfig::load(&dir.join("config.json"))?;
        let w = Weights::from_dir(dir, "diffusion_pytorch_model", device, kind)?;
        Self::new(cfg, &w)
    }

    /// The autoencoder of `cfg` on checkpoint `w` (its dtype).
    pub fn new(cfg: VaeConfig, w: &Weights) -> Result<Self> {
        let kind = w.kind();
        let l = cfg.latent_channels;
        let stats = w.with_kind(Kind::Float);
        let bn_mean = stats.get("bn.running_mean", &[4 * l])?;
        let bn_std = (stats.get("bn.running_var", &[4 * l])? + cfg.batch_norm_eps).sqrt();
        let vae = Self {
            encoder: Coder::encoder(&w.pp("encoder"), &cfg)?,
            decoder: Coder::decoder(&w.pp("decoder"), &cfg)?,
            quant_conv: match cfg.use_quant_conv {
                true => Some(Conv2d::new(&w.pp("quant_conv"), 2 * l, 2 * l, 1, 1, 0)?),
                false => None,
            },
            post_quant_conv: match cfg.use_post_quant_conv {
                true => Some(Conv2d::new(&w.pp("post_quant_conv"), l, l, 1, 1, 0)?),
                false => None,
            },
            bn_mean,
            bn_std,
            kind,
            cfg,
        };
        Ok(vae)
    }

    /// Its dtype.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Pixels `[B, 3, H, W]` in [-1, 1] → the posterior's mode `[B, latent, H/f, W/f]`.
    pub fn encode(&self, pixels: &Tensor) -> Tensor {
        let mut h = self.encoder.forward(&pixels.to_kind(self.kind));
        if let Some(q) = &self.quant_conv {
            h = q.forward(&h);
        }
        h.narrow(1, 0, self.cfg.latent_channels)
    }

    /// Latents `[B, latent, h, w]` → pixels `[B, 3, h·f, w·f]` (unclamped).
    pub fn decode(&self, z: &Tensor) -> Tensor {
        let mut z = z.to_kind(self.kind);
        if let Some(q) = &self.post_quant_conv {
            z = q.forward(&z);
        }
        self.decoder.forward(&z)
    }

    /// 2×2-patchified latents `[B, 4·latent, h, w]` normalised by the BatchNorm statistics.
    pub fn normalize(&self, patched: &Tensor) -> Tensor {
        let c = self.bn_mean.size()[0];
        let shape = [1, c, 1, 1];
        (patched.to_kind(Kind::Float) - self.bn_mean.view(shape)) / self.bn_std.view(shape)
    }

    /// The inverse of [`Self::normalize`].
    pub fn denormalize(&self, patched: &Tensor) -> Tensor {
        let c = self.bn_mean.size()[0];
        let shape = [1, c, 1, 1];
        patched.to_kind(Kind::Float) * self.bn_std.view(shape) + self.bn_mean.view(shape)
    }
}

/// `[B, C, H, W]` → `[B, 4C, H/2, W/2]`, channels ordered `(c, dy, dx)`.
pub fn patchify(x: &Tensor) -> Tensor {
    let (b, c, h, w) = x.size4().expect("[B, C, H, W]");
    x.view([b, c, h / 2, 2, w / 2, 2]).permute([0, 1, 3, 5, 2, 4]).reshape([b, c * 4, h / 2, w / 2])
}

/// The inverse of [`patchify`].
pub fn unpatchify(x: &Tensor) -> Tensor {
    let (b, c, h, w) = x.size4().expect("[B, C, H, W]");
    x.reshape([b, c / 4, 2, 2, h, w]).permute([0, 1, 4, 2, 5, 3]).reshape([b, c / 4, h * 2, w * 2])
}
