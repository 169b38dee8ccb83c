//! The video VAE's encoder (`AutoencoderKLLTX2Video.encoder`), for image-to-video's first
//! frame: patchified pixels (its channel order: frames-in-patch, then column, then row offsets),
//! down blocks of residual blocks each closed by a space/time-to-depth downsampler with a
//! channel-averaged shortcut, a middle block, and the posterior's mean (the pipeline takes the
//! mode: the first `latent_channels` of the output's channels).

use std::path::Path;

use anyhow::{ensure, Context, Result};
use fastvideo_layers::config::{read_config_with, unsupported};
use fastvideo_torch::weights::Weights;
use tch::{Device, Kind, Tensor};

use crate::video_vae::{bools, channel_rms, CausalConv3d, ResBlock, VideoVaeConfig};

/// `LTX2VideoDownsampler3d`: convolution to `out / (st·sh·sw)` channels then time and space into
/// depth, plus the input moved to depth the same way and averaged over channel groups.
struct Downsampler {
    conv: CausalConv3d,
    stride: [i64; 3],
    group: i64,
}

/// `[B, C, F, H, W]` → `[B, C·st·sh·sw, F/st, H/sh, W/sw]`, the diffusers order (channel, then
/// the frame, row and column offsets).
fn to_depth(x: &Tensor, s: [i64; 3]) -> Tensor {
    let [b, c, f, h, w] = x.size()[..] else { unreachable!("5-D") };
    x.reshape([b, c, f / s[0], s[0], h / s[1], s[1], w / s[2], s[2]]).permute([0, 1, 3, 5, 7, 2, 4, 6]).reshape([
        b,
        c * s[0] * s[1] * s[2],
        f / s[0],
        h / s[1],
        w / s[2],
    ])
}

impl Downsampler {
    fn forward(&self, x: &Tensor, causal: bool) -> Tensor {
        let s = self.stride;
        let x = match s[0] > 1 {
            true => Tensor::cat(&[&x.narrow(2, 0, s[0] - 1), x], 2),
            false => x.shallow_clone(),
        };
        let r = to_depth(&x, s);
        let [b, c, f, h, w] = r.size()[..] else { unreachable!("5-D") };
        let residual = r.reshape([b, c / self.group, self.group, f, h, w]).mean_dim(2, false, r.kind());
        to_depth(&self.conv.forward(&x, causal), s) + residual
    }
}

struct DownBlock {
    resnets: Vec<ResBlock>,
    down: Option<Downsampler>,
}

/// The encoder of an LTX-2 video VAE.
pub struct Ltx2VideoEncoder {
    latent_channels: i64,
    patch: (i64, i64),
    causal: bool,
    conv_in: CausalConv3d,
    blocks: Vec<DownBlock>,
    mid: Vec<ResBlock>,
    conv_out: CausalConv3d,
}

// SAFETY: the weights are read-only after construction and libtorch kernels may read one
// tensor from several threads; nothing here mutates shared state.
unsafe impl Sync for Ltx2VideoEncoder {}

impl Ltx2VideoEncoder {
    /// Reads the encoder of `dir` (`config.json`, `encoder.*` weights) onto `device` in `kind`.
    pub fn load(dir: &Path, device: Device, kind: Kind) -> Result<Self> {
        let path = dir.join("config.json");
        let cfg: VideoVaeConfig = read_config_with(&path, &[])?;
        let w = Weights::from_dir(dir, "diffusion_pytorch_model", device, kind)?;
        Self::new(&cfg, &w.pp("encoder"), &path).with_context(|| format!("{}", dir.display()))
    }

    fn new(c: &VideoVaeConfig, w: &Weights, path: &Path) -> Result<Self> {
        let reflect = match c.encoder_spatial_padding_mode.as_deref().unwrap_or("zeros") {
            "zeros" => false,
            "reflect" => true,
            other => return Err(unsupported(path, "encoder_spatial_padding_mode", other, "zeros or reflect")),
        };
        let channels = c.block_out_channels.clone().unwrap_or_else(|| vec![256, 512, 1024, 2048]);
        let layers: Vec<i64> = c.layers_per_block.clone().unwrap_or_else(|| vec![4, 6, 6, 2, 2]);
        let n = channels.len();
        ensure!(layers.len() == n + 1, "{}: layers_per_block needs {} entries", path.display(), n + 1);
        let scaling = match &c.spatio_temporal_scaling {
            Some(v) => bools(v, n, path, "spatio_temporal_scaling")?,
            None => vec![true; n],
        };
        let types = c
            .downsample_type
            .clone()
            .unwrap_or_else(|| ["spatial", "temporal", "spatiotemporal", "spatiotemporal"].map(String::from).to_vec());
        if let Some(t) = c.down_block_types.as_ref().and_then(|t| t.iter().find(|t| *t != "LTX2VideoDownBlock3D")) {
            return Err(unsupported(path, "down_block_types", t, "LTX2VideoDownBlock3D"));
        }
        let (p, pt) = (c.patch_size, c.patch_size_t);
        let eps = c.resnet_norm_eps;
        let mut width = c.latent_channels;
        let conv_in = CausalConv3d::new(&w.pp("conv_in"), c.in_channels * p * p * pt, width, reflect)?;
        let mut blocks = Vec::with_capacity(n);
        for i in 0..n {
            let b = w.pp("down_blocks").pp(i);
            let out = channels[i];
            let resnets = (0..layers[i])
                .map(|j| ResBlock::new(&b.pp("resnets").pp(j), width, width, reflect, eps))
                .collect::<Result<Vec<_>>>()?;
            let down = match (scaling[i], types.get(i).map(String::as_str)) {
                (false, _) => {
                    ensure!(out == width, "{}: a block without downsampling keeps its width", path.display());
                    None
                }
                (true, Some(kind @ ("spatial" | "temporal" | "spatiotemporal"))) => {
                    let stride = match kind {
                        "spatial" => [1, 2, 2],
                        "temporal" => [2, 1, 1],
                        _ => [2, 2, 2],
                    };
                    let prod = stride.iter().product::<i64>();
                    let conv = CausalConv3d::new(&b.pp("downsamplers.0.conv"), width, out / prod, reflect)?;
                    Some(Downsampler { conv, stride, group: width * prod / out })
                }
                (true, other) => {
                    return Err(unsupported(
                        path,
                        "downsample_type",
                        other.unwrap_or("(missing)"),
                        "spatial, temporal or spatiotemporal",
                    ))
                }
            };
            blocks.push(DownBlock { resnets, down });
            width = out;
        }
        let mid = (0..layers[n])
            .map(|j| ResBlock::new(&w.pp("mid_block.resnets").pp(j), width, width, reflect, eps))
            .collect::<Result<Vec<_>>>()?;
        let conv_out = CausalConv3d::new(&w.pp("conv_out"), width, c.latent_channels + 1, reflect)?;
        Ok(Self {
            latent_channels: c.latent_channels,
            patch: (p, pt),
            causal: c.encoder_causal,
            conv_in,
            blocks,
            mid,
            conv_out,
        })
    }

    /// The dtype its weights are in.
    pub fn kind(&self) -> Kind {
        self.conv_in.kind()
    }

    /// Pixels `[B, 3, F, H, W]` in [-1, 1] → the posterior's mean `[B, C, F', H', W']`.
    pub fn encode(&self, x: &Tensor) -> Result<Tensor> {
        let [b, c, f, h, w] = x.size()[..] else { anyhow::bail!("video encoder: pixels {:?}, expected 5-D", x.size()) };
        let (p, pt) = self.patch;
        ensure!(f % pt == 0 && h % p == 0 && w % p == 0, "video encoder: {f}x{h}x{w} is not a multiple of its patch");
        // diffusers' patch order: channel, frame offset, column offset, row offset.
        let x = x.reshape([b, c, f / pt, pt, h / p, p, w / p, p]).permute([0, 1, 3, 7, 5, 2, 4, 6]).reshape([
            b,
            c * pt * p * p,
            f / pt,
            h / p,
            w / p,
        ]);
        let mut x = self.conv_in.forward(&x, self.causal);
        for blk in &self.blocks {
            for r in &blk.resnets {
                x = r.forward(&x, self.causal);
            }
            if let Some(d) = &blk.down {
                x = d.forward(&x, self.causal);
            }
        }
        for r in &self.mid {
            x = r.forward(&x, self.causal);
        }
        let out = self.conv_out.forward(&channel_rms(&x).silu(), self.causal);
        Ok(out.narrow(1, 0, self.latent_channels))
    }
}
