//! `AutoencoderKLLTX2Video`'s decoder: latents `[B, 128, F, H, W]` → RGB `[B, 3, 8(F − 1) + 1,
//! 32H, 32W]`. Causal (or centred) 3-D convolutions with reflect-padded space, per-channel RMS
//! norms, depth-to-space upsamplers whose residual path repeats the input's channels, and a
//! final 4×4 unpatchify.
//!
//! Quirks kept from the reference: the decoder reverses its channel, layer, residual and factor
//! lists but indexes `upsample_type` as given; the unpatchify puts the first spatial patch axis
//! on the columns and the second on the rows.

use std::path::Path;

use anyhow::{ensure, Context, Result};
use fastvideo_layers::config::{read_config_with, unsupported};
use fastvideo_torch::weights::Weights;
use serde::Deserialize;
use serde_json::Value;
use tch::{Device, Kind, Tensor};

/// `vae/config.json`; field names are diffusers'. The encoder's keys are read and left unused.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct VideoVaeConfig {
    #[serde(default = "d::three")]
    pub in_channels: i64,
    #[serde(default = "d::three")]
    pub out_channels: i64,
    #[serde(default = "d::c128")]
    pub latent_channels: i64,
    #[serde(default)]
    pub block_out_channels: Option<Vec<i64>>,
    #[serde(default)]
    pub down_block_types: Option<Vec<String>>,
    #[serde(default = "d::dec_channels")]
    pub decoder_block_out_channels: Vec<i64>,
    #[serde(default)]
    pub layers_per_block: Option<Vec<i64>>,
    #[serde(default = "d::dec_layers")]
    pub decoder_layers_per_block: Vec<usize>,
    #[serde(default)]
    pub spatio_temporal_scaling: Option<Value>,
    #[serde(default = "d::yes_value")]
    pub decoder_spatio_temporal_scaling: Value,
    #[serde(default = "d::no_value")]
    pub decoder_inject_noise: Value,
    #[serde(default)]
    pub downsample_type: Option<Vec<String>>,
    #[serde(default = "d::up_types")]
    pub upsample_type: Vec<String>,
    #[serde(default = "d::yes_value")]
    pub upsample_residual: Value,
    #[serde(default = "d::factors")]
    pub upsample_factor: Vec<i64>,
    #[serde(default)]
    pub timestep_conditioning: bool,
    #[serde(default = "d::four")]
    pub patch_size: i64,
    #[serde(default = "d::one")]
    pub patch_size_t: i64,
    #[serde(default = "d::eps")]
    pub resnet_norm_eps: f64,
    #[serde(default = "d::scale")]
    pub scaling_factor: f64,
    #[serde(default = "d::yes")]
    pub encoder_causal: bool,
    #[serde(default = "d::yes")]
    pub decoder_causal: bool,
    #[serde(default)]
    pub encoder_spatial_padding_mode: Option<String>,
    #[serde(default = "d::reflect")]
    pub decoder_spatial_padding_mode: String,
    #[serde(default)]
    pub spatial_compression_ratio: Option<i64>,
    #[serde(default)]
    pub temporal_compression_ratio: Option<i64>,
}

mod d {
    use serde_json::Value;
    pub fn one() -> i64 {
        1
    }
    pub fn three() -> i64 {
        3
    }
    pub fn four() -> i64 {
        4
    }
    pub fn c128() -> i64 {
        128
    }
    pub fn dec_channels() -> Vec<i64> {
        vec![256, 512, 1024]
    }
    pub fn dec_layers() -> Vec<usize> {
        vec![5, 5, 5, 5]
    }
    pub fn up_types() -> Vec<String> {
        vec!["spatiotemporal".into(); 3]
    }
    pub fn factors() -> Vec<i64> {
        vec![2, 2, 2]
    }
    pub fn eps() -> f64 {
        1e-6
    }
    pub fn scale() -> f64 {
        1.0
    }
    pub fn yes() -> bool {
        true
    }
    pub fn yes_value() -> Value {
        Value::Bool(true)
    }
    pub fn no_value() -> Value {
        Value::Bool(false)
    }
    pub fn reflect() -> String {
        "reflect".into()
    }
}

/// A bool or a list of bools (`n` entries when a bool).
pub(crate) fn bools(v: &Value, n: usize, path: &Path, key: &str) -> Result<Vec<bool>> {
    match v {
        Value::Bool(b) => Ok(vec![*b; n]),
        Value::Array(a) if a.iter().all(Value::is_boolean) => Ok(a.iter().map(|b| b.as_bool().unwrap()).collect()),
        other => Err(unsupported(path, key, other, "a bool or a list of bools")),
    }
}

/// `LTX2VideoCausalConv3d`: frames padded by repeating the first (causal) or both ends, space
/// padded by reflection (or zeros), then an unpadded 3×3×3 convolution (`.conv`).
pub(crate) struct CausalConv3d {
    weight: Tensor,
    bias: Tensor,
    reflect: bool,
}

impl CausalConv3d {
    pub(crate) fn new(w: &Weights, input: i64, output: i64, reflect: bool) -> Result<Self> {
        Ok(Self {
            weight: w.get("conv.weight", &[output, input, 3, 3, 3])?,
            bias: w.get("conv.bias", &[output])?,
            reflect,
        })
    }

    pub(crate) fn kind(&self) -> Kind {
        self.weight.kind()
    }

    pub(crate) fn forward(&self, x: &Tensor, causal: bool) -> Tensor {
        let f = x.size()[2];
        let first = x.narrow(2, 0, 1);
        let x = match causal {
            true => Tensor::cat(&[&first, &first, x], 2),
            false => Tensor::cat(&[&first, x, &x.narrow(2, f - 1, 1)], 2),
        };
        let x = match self.reflect {
            true => x.pad([1, 1, 1, 1, 0, 0], "reflect", None),
            false => x.constant_pad_nd([1, 1, 1, 1, 0, 0]),
        };
        fastvideo_layers::conv::conv3d(&x, &self.weight, &self.bias, [1, 1, 1], [0, 0, 0])
    }
}

/// `PerChannelRMSNorm`: `x / sqrt(mean(x², channels) + 1e-8)`.
pub(crate) fn channel_rms(x: &Tensor) -> Tensor {
    x / (x.square().mean_dim(1, true, x.kind()) + 1e-8).sqrt()
}

/// `LTX2VideoResnetBlock3d` without noise injection or timestep conditioning.
pub(crate) struct ResBlock {
    conv1: CausalConv3d,
    conv2: CausalConv3d,
    /// LayerNorm over channels and a 1×1×1 convolution, where the widths differ.
    shortcut: Option<(Tensor, Tensor, Tensor, Tensor)>,
    eps: f64,
}

impl ResBlock {
    pub(crate) fn new(w: &Weights, input: i64, output: i64, reflect: bool, eps: f64) -> Result<Self> {
        let shortcut = (input != output)
            .then(|| -> Result<_> {
                Ok((
                    w.get("norm3.weight", &[input])?,
                    w.get("norm3.bias", &[input])?,
                    w.get("conv_shortcut.weight", &[output, input, 1, 1, 1])?,
                    w.get("conv_shortcut.bias", &[output])?,
                ))
            })
            .transpose()?;
        Ok(Self {
            conv1: CausalConv3d::new(&w.pp("conv1"), input, output, reflect)?,
            conv2: CausalConv3d::new(&w.pp("conv2"), output, output, reflect)?,
            shortcut,
            eps,
        })
    }

    pub(crate) fn forward(&self, x: &Tensor, causal: bool) -> Tensor {
        let h = self.conv1.forward(&channel_rms(x).silu(), causal);
        let h = self.conv2.forward(&channel_rms(&h).silu(), causal);
        let skip = match &self.shortcut {
            Some((nw, nb, cw, cb)) => {
                let c = x.size()[1];
                let n = x.movedim([1], [-1]).layer_norm([c], Some(nw), Some(nb), self.eps, false).movedim([-1], [1]);
                n.conv3d(cw, Some(cb), [1, 1, 1], [0, 0, 0], [1, 1, 1], 1)
            }
            None => x.shallow_clone(),
        };
        h + skip
    }
}

/// Depth to space by `stride` (time, rows, columns) with the first `stride[0] − 1` frames
/// dropped; the residual path does the same to the input and repeats its channels.
struct Upsampler {
    conv: CausalConv3d,
    stride: [i64; 3],
    residual: bool,
    factor: i64,
}

fn depth_to_space(x: &Tensor, s: [i64; 3]) -> Tensor {
    let [b, _, f, h, w] = x.size()[..] else { unreachable!("5-D") };
    x.reshape([b, -1, s[0], s[1], s[2], f, h, w]).permute([0, 1, 5, 2, 6, 3, 7, 4]).reshape([
        b,
        -1,
        f * s[0],
        h * s[1],
        w * s[2],
    ])
}

impl Upsampler {
    fn forward(&self, x: &Tensor, causal: bool) -> Tensor {
        let s = self.stride;
        let drop = |t: Tensor| {
            let n = t.size()[2];
            t.narrow(2, s[0] - 1, n - (s[0] - 1))
        };
        let h = drop(depth_to_space(&self.conv.forward(x, causal), s));
        match self.residual {
            true => {
                let repeats = s.iter().product::<i64>() / self.factor;
                h + drop(depth_to_space(x, s).repeat([1, repeats, 1, 1, 1]))
            }
            false => h,
        }
    }
}

struct UpBlock {
    conv_in: Option<ResBlock>,
    upsampler: Option<Upsampler>,
    resnets: Vec<ResBlock>,
}

/// The video VAE's decoder and its latent statistics.
pub struct Ltx2VideoDecoder {
    /// Its config.
    pub cfg: VideoVaeConfig,
    conv_in: CausalConv3d,
    mid: Vec<ResBlock>,
    up: Vec<UpBlock>,
    conv_out: CausalConv3d,
    /// Per-channel mean of the latents (`latents_mean`).
    pub latents_mean: Tensor,
    /// Per-channel standard deviation of the latents (`latents_std`).
    pub latents_std: Tensor,
}

// SAFETY: the weights are read-only after construction and libtorch kernels may read one
// tensor from several threads; nothing here mutates shared state.
unsafe impl Sync for Ltx2VideoDecoder {}

impl Ltx2VideoDecoder {
    /// The dtype its weights are in.
    pub fn kind(&self) -> Kind {
        self.latents_mean.kind()
    }

    /// `(spatial, temporal)` pixels and frames per latent cell: the config's, else as diffusers
    /// derives them (the patch sizes times 2 per scaling block of the encoder).
    pub fn compression(&self) -> (i64, i64) {
        let c = &self.cfg;
        let scaling = match &c.spatio_temporal_scaling {
            Some(serde_json::Value::Array(v)) => v.iter().filter(|b| b.as_bool() == Some(true)).count() as u32,
            Some(_) => 0,
            None => 4,
        };
        (
            c.spatial_compression_ratio.unwrap_or(c.patch_size << scaling),
            c.temporal_compression_ratio.unwrap_or(c.patch_size_t << scaling),
        )
    }

    /// Reads `dir` (`config.json`, the decoder's weights and the latent statistics) onto
    /// `device` in `kind`.
    pub fn load(dir: &Path, device: Device, kind: Kind) -> Result<Self> {
        let path = dir.join("config.json");
        let cfg: VideoVaeConfig = read_config_with(&path, &[])?;
        if cfg.timestep_conditioning {
            return Err(unsupported(
                &path,
                "timestep_conditioning",
                true,
                "false (LTX-2's decoders are unconditioned)",
            ));
        }
        if !["reflect", "zeros"].contains(&cfg.decoder_spatial_padding_mode.as_str()) {
            return Err(unsupported(
                &path,
                "decoder_spatial_padding_mode",
                &cfg.decoder_spatial_padding_mode,
                "reflect or zeros",
            ));
        }
        let w = Weights::from_dir(dir, "diffusion_pytorch_model", device, kind)?;
        Self::new(cfg, &w, &path).with_context(|| format!("{}", dir.display()))
    }

    fn new(cfg: VideoVaeConfig, w: &Weights, path: &Path) -> Result<Self> {
        let n = cfg.decoder_layers_per_block.len();
        let scaling = bools(&cfg.decoder_spatio_temporal_scaling, n - 1, path, "decoder_spatio_temporal_scaling")?;
        let noise = bools(&cfg.decoder_inject_noise, n, path, "decoder_inject_noise")?;
        if noise.iter().any(|b| *b) {
            return Err(unsupported(path, "decoder_inject_noise", "true", "false"));
        }
        let residual = bools(&cfg.upsample_residual, n - 1, path, "upsample_residual")?;
        let channels: Vec<i64> = cfg.decoder_block_out_channels.iter().rev().copied().collect();
        let layers: Vec<usize> = cfg.decoder_layers_per_block.iter().rev().copied().collect();
        let scaling: Vec<bool> = scaling.into_iter().rev().collect();
        let residual: Vec<bool> = residual.into_iter().rev().collect();
        let factors: Vec<i64> = cfg.upsample_factor.iter().rev().copied().collect();
        ensure!(
            channels.len() + 1 == n
                && scaling.len() == channels.len()
                && residual.len() == channels.len()
                && factors.len() == channels.len()
                && cfg.upsample_type.len() >= channels.len(),
            "{}: the decoder's lists must describe {} up blocks",
            path.display(),
            n - 1
        );
        let reflect = cfg.decoder_spatial_padding_mode == "reflect";
        let eps = cfg.resnet_norm_eps;
        let d = w.pp("decoder");
        let mut out = channels[0];
        let conv_in = CausalConv3d::new(&d.pp("conv_in"), cfg.latent_channels, out, reflect)?;
        let mid = (0..layers[0])
            .map(|j| ResBlock::new(&d.pp("mid_block.resnets").pp(j), out, out, reflect, eps))
            .collect::<Result<_>>()?;
        let mut up = Vec::new();
        for i in 0..channels.len() {
            let input = out / factors[i];
            out = channels[i] / factors[i];
            let b = d.pp("up_blocks").pp(i);
            // The reference indexes `upsample_type` un-reversed.
            let stride = match cfg.upsample_type[i].as_str() {
                "spatial" => [1, 2, 2],
                "temporal" => [2, 1, 1],
                "spatiotemporal" => [2, 2, 2],
                other => return Err(unsupported(path, "upsample_type", other, "spatial, temporal or spatiotemporal")),
            };
            let upsampler = scaling[i]
                .then(|| -> Result<Upsampler> {
                    let cin = out * factors[i];
                    let cout = cin * stride.iter().product::<i64>() / factors[i];
                    Ok(Upsampler {
                        conv: CausalConv3d::new(&b.pp("upsamplers.0.conv"), cin, cout, reflect)?,
                        stride,
                        residual: residual[i],
                        factor: factors[i],
                    })
                })
                .transpose()?;
            up.push(UpBlock {
                conv_in: (input != out)
                    .then(|| ResBlock::new(&b.pp("conv_in"), input, out, reflect, eps))
                    .transpose()?,
                upsampler,
                resnets: (0..layers[i + 1])
                    .map(|j| ResBlock::new(&b.pp("resnets").pp(j), out, out, reflect, eps))
                    .collect::<Result<_>>()?,
            });
        }
        let p = cfg.patch_size;
        Ok(Self {
            conv_in,
            mid,
            up,
            conv_out: CausalConv3d::new(&d.pp("conv_out"), out, cfg.out_channels * p * p * cfg.patch_size_t, reflect)?,
            latents_mean: w.get("latents_mean", &[cfg.latent_channels])?,
            latents_std: w.get("latents_std", &[cfg.latent_channels])?,
            cfg,
        })
    }

    /// Latents `[B, C, F, H, W]` → pixels `[B, out_channels, frames, rows, columns]`, causal as
    /// the config says unless `causal` is given.
    pub fn decode(&self, z: &Tensor, causal: Option<bool>) -> Result<Tensor> {
        let s = z.size();
        ensure!(
            s.len() == 5 && s[1] == self.cfg.latent_channels,
            "video decoder: latents {s:?}, expected [B, {}, F, H, W]",
            self.cfg.latent_channels
        );
        let causal = causal.unwrap_or(false) || self.cfg.decoder_causal;
        let mut h = self.conv_in.forward(z, causal);
        for r in &self.mid {
            h = r.forward(&h, causal);
        }
        for blk in &self.up {
            if let Some(c) = &blk.conv_in {
                h = c.forward(&h, causal);
            }
            if let Some(u) = &blk.upsampler {
                h = u.forward(&h, causal);
            }
            for r in &blk.resnets {
                h = r.forward(&h, causal);
            }
        }
        let h = self.conv_out.forward(&channel_rms(&h).silu(), causal);
        let (p, pt) = (self.cfg.patch_size, self.cfg.patch_size_t);
        let [b, _, f, hh, ww] = h.size()[..] else { unreachable!("5-D") };
        Ok(h.reshape([b, -1, pt, p, p, f, hh, ww]).permute([0, 1, 5, 2, 6, 4, 7, 3]).reshape([
            b,
            -1,
            f * pt,
            hh * p,
            ww * p,
        ]))
    }
}
