//! `AutoencoderKLLTX2Audio`'s decoder: audio latents `[B, 8, T, 16]` → a mel spectrogram
//! `[B, 2, 4T − 3, 64]` for the vocoder. Causal 2-D convolutions (padded on one side of the
//! time axis, or symmetric for `causality_axis = "none"`), pixel or group norms, nearest ×2
//! upsampling whose causal variant drops the first row. The latents' statistics (which the
//! pipeline normalises audio latents by) are buffers of the checkpoint.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{Context, Result};
use fastvideo_layers::config::{read_config_with, unsupported};
use fastvideo_torch::weights::Weights;
use serde::Deserialize;
use tch::{Device, Kind, Tensor};

/// Latent frames per mel frame, and mel bins per latent bin.
pub const LATENT_DOWNSAMPLE_FACTOR: i64 = 4;

/// `audio_vae/config.json`; field names are diffusers'.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct AudioVaeConfig {
    #[serde(default = "d::c128")]
    pub base_channels: i64,
    #[serde(default = "d::two")]
    pub output_channels: i64,
    #[serde(default = "d::mult")]
    pub ch_mult: Vec<i64>,
    #[serde(default = "d::two_usize")]
    pub num_res_blocks: usize,
    #[serde(default)]
    pub attn_resolutions: Option<Vec<i64>>,
    #[serde(default = "d::two")]
    pub in_channels: i64,
    #[serde(default = "d::res")]
    pub resolution: i64,
    #[serde(default = "d::eight")]
    pub latent_channels: i64,
    #[serde(default = "d::pixel")]
    pub norm_type: String,
    #[serde(default = "d::height")]
    pub causality_axis: String,
    #[serde(default)]
    pub dropout: f64,
    #[serde(default)]
    pub mid_block_add_attention: bool,
    #[serde(default = "d::rate")]
    pub sample_rate: i64,
    #[serde(default = "d::hop")]
    pub mel_hop_length: i64,
    #[serde(default = "d::yes")]
    pub is_causal: bool,
    #[serde(default = "d::mel")]
    pub mel_bins: Option<i64>,
    #[serde(default = "d::yes")]
    pub double_z: bool,
}

mod d {
    pub fn c128() -> i64 {
        128
    }
    pub fn two() -> i64 {
        2
    }
    pub fn two_usize() -> usize {
        2
    }
    pub fn eight() -> i64 {
        8
    }
    pub fn mult() -> Vec<i64> {
        vec![1, 2, 4]
    }
    pub fn res() -> i64 {
        256
    }
    pub fn pixel() -> String {
        "pixel".into()
    }
    pub fn height() -> String {
        "height".into()
    }
    pub fn rate() -> i64 {
        16000
    }
    pub fn hop() -> i64 {
        160
    }
    pub fn yes() -> bool {
        true
    }
    pub fn mel() -> Option<i64> {
        Some(64)
    }
}

/// Which side of which axis a causal convolution pads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Causality {
    None,
    Width,
    Height,
    WidthCompatibility,
}

/// `LTX2AudioCausalConv2d`: pad, then an unpadded convolution (`.conv` in the checkpoint).
struct CausalConv {
    weight: Tensor,
    bias: Tensor,
    /// (left, right, top, bottom).
    pad: [i64; 4],
}

impl CausalConv {
    fn new(w: &Weights, input: i64, output: i64, k: i64, axis: Causality) -> Result<Self> {
        let p = k - 1;
        let (half, rest) = (p / 2, p - p / 2);
        let pad = match axis {
            Causality::None => [half, rest, half, rest],
            Causality::Width | Causality::WidthCompatibility => [p, 0, half, rest],
            Causality::Height => [half, rest, p, 0],
        };
        Ok(Self { weight: w.get("conv.weight", &[output, input, k, k])?, bias: w.get("conv.bias", &[output])?, pad })
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        x.constant_pad_nd(self.pad).conv2d(&self.weight, Some(&self.bias), [1, 1], [0, 0], [1, 1], 1)
    }
}

/// Pixel norm (RMS over channels) or `GroupNorm(32)` with its affine parameters.
enum Norm {
    Pixel,
    Group(Tensor, Tensor),
}

impl Norm {
    fn new(w: &Weights, channels: i64, group: bool) -> Result<Self> {
        Ok(match group {
            true => Norm::Group(w.get("weight", &[channels])?, w.get("bias", &[channels])?),
            false => Norm::Pixel,
        })
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        match self {
            Norm::Pixel => x / (x.square().mean_dim(1, true, x.kind()) + 1e-6).sqrt(),
            Norm::Group(w, b) => x.group_norm(32, Some(w), Some(b), 1e-6, false),
        }
    }
}

struct ResBlock {
    norm1: Norm,
    conv1: CausalConv,
    norm2: Norm,
    conv2: CausalConv,
    shortcut: Option<CausalConv>,
}

impl ResBlock {
    fn new(w: &Weights, input: i64, output: i64, group: bool, axis: Causality) -> Result<Self> {
        Ok(Self {
            norm1: Norm::new(&w.pp("norm1"), input, group)?,
            conv1: CausalConv::new(&w.pp("conv1"), input, output, 3, axis)?,
            norm2: Norm::new(&w.pp("norm2"), output, group)?,
            conv2: CausalConv::new(&w.pp("conv2"), output, output, 3, axis)?,
            shortcut: (input != output)
                .then(|| CausalConv::new(&w.pp("nin_shortcut"), input, output, 1, axis))
                .transpose()?,
        })
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        let h = self.conv1.forward(&self.norm1.forward(x).silu());
        let h = self.conv2.forward(&self.norm2.forward(&h).silu());
        match &self.shortcut {
            Some(s) => s.forward(x) + h,
            None => x + h,
        }
    }
}

/// `LTX2AudioAttnBlock`: single-head attention over the time × mel cells, 1×1 projections.
struct AttnBlock {
    norm: Norm,
    q: (Tensor, Tensor),
    k: (Tensor, Tensor),
    v: (Tensor, Tensor),
    out: (Tensor, Tensor),
}

impl AttnBlock {
    fn new(w: &Weights, c: i64, group: bool) -> Result<Self> {
        let conv = |n: &str| -> Result<(Tensor, Tensor)> {
            Ok((w.get(&format!("{n}.weight"), &[c, c, 1, 1])?, w.get(&format!("{n}.bias"), &[c])?))
        };
        Ok(Self {
            norm: Norm::new(&w.pp("norm"), c, group)?,
            q: conv("q")?,
            k: conv("k")?,
            v: conv("v")?,
            out: conv("proj_out")?,
        })
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        let h = self.norm.forward(x);
        let p = |(w, b): &(Tensor, Tensor), t: &Tensor| t.conv2d(w, Some(b), [1, 1], [0, 0], [1, 1], 1);
        let [b, c, hh, ww] = x.size()[..] else { unreachable!("4-D") };
        let q = p(&self.q, &h).reshape([b, c, hh * ww]).permute([0, 2, 1]);
        let k = p(&self.k, &h).reshape([b, c, hh * ww]);
        let v = p(&self.v, &h).reshape([b, c, hh * ww]);
        let attn = (q.bmm(&k) * (c as f64).powf(-0.5)).softmax(2, x.kind());
        let o = v.bmm(&attn.permute([0, 2, 1])).reshape([b, c, hh, ww]);
        x + p(&self.out, &o)
    }
}

struct Stage {
    blocks: Vec<(ResBlock, Option<AttnBlock>)>,
    upsample: Option<CausalConv>,
}

/// The audio VAE's decoder and its latent statistics.
pub struct Ltx2AudioDecoder {
    /// Its config.
    pub cfg: AudioVaeConfig,
    axis: Causality,
    conv_in: CausalConv,
    mid: (ResBlock, Option<AttnBlock>, ResBlock),
    up: Vec<Stage>,
    norm_out: Norm,
    conv_out: CausalConv,
    /// Per-channel mean of the packed latents (`latents_mean`).
    pub latents_mean: Tensor,
    /// Per-channel standard deviation of the packed latents (`latents_std`).
    pub latents_std: Tensor,
}

// SAFETY: the weights are read-only after construction and libtorch kernels may read one
// tensor from several threads; nothing here mutates shared state.
unsafe impl Sync for Ltx2AudioDecoder {}

impl Ltx2AudioDecoder {
    /// The dtype its weights are in.
    pub fn kind(&self) -> Kind {
        self.latents_mean.kind()
    }

    /// Reads `dir` (`config.json`, the weights; the encoder's are left unread) onto `device` in
    /// `kind`.
    pub fn load(dir: &Path, device: Device, kind: Kind) -> Result<Self> {
        let path = dir.join("config.json");
        let cfg: AudioVaeConfig = read_config_with(&path, &[])?;
        let axis = match cfg.causality_axis.as_str() {
            "none" => Causality::None,
            "width" => Causality::Width,
            "height" => Causality::Height,
            "width-compatibility" => Causality::WidthCompatibility,
            other => {
                return Err(unsupported(&path, "causality_axis", other, "none, width, height or width-compatibility"))
            }
        };
        if !["pixel", "group"].contains(&cfg.norm_type.as_str()) {
            return Err(unsupported(&path, "norm_type", &cfg.norm_type, "pixel or group"));
        }
        if cfg.norm_type == "group" && axis != Causality::None {
            return Err(unsupported(
                &path,
                "norm_type",
                "group",
                "pixel with a causal axis (the reference refuses it too)",
            ));
        }
        let w = Weights::from_dir(dir, "diffusion_pytorch_model", device, kind)?;
        Self::new(cfg, axis, &w).with_context(|| format!("{}", dir.display()))
    }

    fn new(cfg: AudioVaeConfig, axis: Causality, w: &Weights) -> Result<Self> {
        let group = cfg.norm_type == "group";
        let d = w.pp("decoder");
        let levels = cfg.ch_mult.len();
        let top = cfg.base_channels * cfg.ch_mult[levels - 1];
        let attn: BTreeSet<i64> = cfg.attn_resolutions.clone().unwrap_or_default().into_iter().collect();
        let mid_attn =
            cfg.mid_block_add_attention.then(|| AttnBlock::new(&d.pp("mid.attn_1"), top, group)).transpose()?;
        let mid = (
            ResBlock::new(&d.pp("mid.block_1"), top, top, group, axis)?,
            mid_attn,
            ResBlock::new(&d.pp("mid.block_2"), top, top, group, axis)?,
        );
        let mut up: Vec<Option<Stage>> = (0..levels).map(|_| None).collect();
        let mut block_in = top;
        let mut res = cfg.resolution / (1 << (levels - 1));
        for level in (0..levels).rev() {
            let out = cfg.base_channels * cfg.ch_mult[level];
            let s = d.pp("up").pp(level);
            let mut blocks = Vec::new();
            for j in 0..=cfg.num_res_blocks {
                let r = ResBlock::new(&s.pp("block").pp(j), block_in, out, group, axis)?;
                block_in = out;
                let a = attn.contains(&res).then(|| AttnBlock::new(&s.pp("attn").pp(j), out, group)).transpose()?;
                blocks.push((r, a));
            }
            let upsample =
                (level != 0).then(|| CausalConv::new(&s.pp("upsample.conv"), out, out, 3, axis)).transpose()?;
            if level != 0 {
                res *= 2;
            }
            up[level] = Some(Stage { blocks, upsample });
        }
        let stats = cfg.base_channels;
        Ok(Self {
            conv_in: CausalConv::new(&d.pp("conv_in"), cfg.latent_channels, top, 3, axis)?,
            mid,
            up: up.into_iter().map(|s| s.expect("every level built")).collect(),
            norm_out: Norm::new(&d.pp("norm_out"), block_in, group)?,
            conv_out: CausalConv::new(&d.pp("conv_out"), block_in, cfg.output_channels, 3, axis)?,
            latents_mean: w.get("latents_mean", &[stats])?,
            latents_std: w.get("latents_std", &[stats])?,
            axis,
            cfg,
        })
    }

    /// Latents `[B, latent_channels, T, M]` → mel `[B, output_channels, 4T − 3, mel_bins]`.
    pub fn decode(&self, z: &Tensor) -> Result<Tensor> {
        let s = z.size();
        anyhow::ensure!(
            s.len() == 4 && s[1] == self.cfg.latent_channels,
            "audio decoder: latents {s:?}, expected [B, {}, T, M]",
            self.cfg.latent_channels
        );
        let target_t = (s[2] * LATENT_DOWNSAMPLE_FACTOR - (LATENT_DOWNSAMPLE_FACTOR - 1)).max(1);
        let target_m = self.cfg.mel_bins.unwrap_or(s[3]);
        let mut h = self.conv_in.forward(z);
        h = self.mid.0.forward(&h);
        if let Some(a) = &self.mid.1 {
            h = a.forward(&h);
        }
        h = self.mid.2.forward(&h);
        for stage in self.up.iter().rev() {
            for (r, a) in &stage.blocks {
                h = r.forward(&h);
                if let Some(a) = a {
                    h = a.forward(&h);
                }
            }
            if let Some(conv) = &stage.upsample {
                let (hh, ww) = (h.size()[2], h.size()[3]);
                h = conv.forward(&h.upsample_nearest2d([2 * hh, 2 * ww], Some(2.0), Some(2.0)));
                h = match self.axis {
                    Causality::Height => h.narrow(2, 1, h.size()[2] - 1),
                    Causality::Width => h.narrow(3, 1, h.size()[3] - 1),
                    _ => h,
                };
            }
        }
        let out = self.conv_out.forward(&self.norm_out.forward(&h).silu());
        let (t, m) = (out.size()[2].min(target_t), out.size()[3].min(target_m));
        let out = out.narrow(2, 0, t).narrow(3, 0, m);
        Ok(out.constant_pad_nd([0, target_m - m, 0, target_t - t]))
    }
}
