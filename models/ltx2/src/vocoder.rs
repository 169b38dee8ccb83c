//! The vocoders: `LTX2Vocoder` (LTX-2.0: mel spectrogram → 24 kHz waveform, a HiFi-GAN-style
//! generator) and `LTX2VocoderWithBWE` (LTX-2.3: that generator at 16 kHz, then a second one
//! that extends the bandwidth to 48 kHz from the first one's own mel spectrogram, added to a
//! resampled copy of it).
//!
//! Quirks kept from the reference: the LeakyReLU generator's last activation has slope 0.01
//! whatever the config says; `snake` blocks use no beta but the final activation does; the
//! band extension pads the first waveform to a whole number of hops (the reference names an
//! attribute it lacks there, so it only runs when no padding is needed).

use std::path::Path;

use anyhow::{ensure, Context, Result};
use fastvideo_layers::config::{read_config_with, unsupported};
use fastvideo_torch::weights::Weights;
use serde::Deserialize;
use tch::{Device, Kind, Tensor};

/// A generator's config (`LTX2Vocoder`'s, or one half of the band-extending one's).
#[derive(Clone, Debug, Deserialize)]
#[allow(missing_docs)]
pub struct GeneratorConfig {
    pub in_channels: i64,
    pub hidden_channels: i64,
    pub out_channels: i64,
    pub upsample_kernel_sizes: Vec<i64>,
    pub upsample_factors: Vec<i64>,
    pub resnet_kernel_sizes: Vec<i64>,
    pub resnet_dilations: Vec<Vec<i64>>,
    pub act_fn: String,
    pub leaky_relu_negative_slope: f64,
    pub antialias: bool,
    pub antialias_ratio: i64,
    pub antialias_kernel_size: i64,
    pub final_act_fn: Option<String>,
    pub final_bias: bool,
}

/// `vocoder/config.json` of either class (the band-extending one's keys prefixed `bwe_`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
struct RawConfig {
    in_channels: Option<i64>,
    hidden_channels: Option<i64>,
    out_channels: Option<i64>,
    upsample_kernel_sizes: Option<Vec<i64>>,
    upsample_factors: Option<Vec<i64>>,
    resnet_kernel_sizes: Option<Vec<i64>>,
    resnet_dilations: Option<Vec<Vec<i64>>>,
    act_fn: Option<String>,
    leaky_relu_negative_slope: Option<f64>,
    antialias: Option<bool>,
    antialias_ratio: Option<i64>,
    antialias_kernel_size: Option<i64>,
    final_act_fn: Option<Option<String>>,
    final_bias: Option<bool>,
    output_sampling_rate: Option<i64>,
    bwe_in_channels: Option<i64>,
    bwe_hidden_channels: Option<i64>,
    bwe_out_channels: Option<i64>,
    bwe_upsample_kernel_sizes: Option<Vec<i64>>,
    bwe_upsample_factors: Option<Vec<i64>>,
    bwe_resnet_kernel_sizes: Option<Vec<i64>>,
    bwe_resnet_dilations: Option<Vec<Vec<i64>>>,
    bwe_act_fn: Option<String>,
    bwe_leaky_relu_negative_slope: Option<f64>,
    bwe_antialias: Option<bool>,
    bwe_antialias_ratio: Option<i64>,
    bwe_antialias_kernel_size: Option<i64>,
    bwe_final_act_fn: Option<Option<String>>,
    bwe_final_bias: Option<bool>,
    filter_length: Option<i64>,
    hop_length: Option<i64>,
    window_length: Option<i64>,
    num_mel_channels: Option<i64>,
    input_sampling_rate: Option<i64>,
}

/// A 1-D convolution.
struct Conv1d {
    weight: Tensor,
    bias: Option<Tensor>,
    padding: i64,
    dilation: i64,
}

impl Conv1d {
    fn new(w: &Weights, input: i64, output: i64, k: i64, dilation: i64, bias: bool) -> Result<Self> {
        Ok(Self {
            weight: w.get("weight", &[output, input, k])?,
            bias: bias.then(|| w.get("bias", &[output])).transpose()?,
            padding: dilation * (k - 1) / 2,
            dilation,
        })
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        x.conv1d(&self.weight, self.bias.as_ref(), [1], [self.padding], [self.dilation], 1)
    }
}

/// `SnakeBeta`: `x + sin²(αx) / (β + 1e-9)` with `α = exp(alpha)`, `β = exp(beta)` (or α).
struct Snake {
    alpha: Tensor,
    beta: Option<Tensor>,
}

impl Snake {
    fn new(w: &Weights, channels: i64, beta: bool) -> Result<Self> {
        Ok(Self {
            alpha: w.get("alpha", &[channels])?.exp().view([1, -1, 1]),
            beta: beta.then(|| w.get("beta", &[channels])).transpose()?.map(|b| b.exp().view([1, -1, 1])),
        })
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        let amp = self.beta.as_ref().unwrap_or(&self.alpha);
        x + (amp + 1e-9).reciprocal() * (x * &self.alpha).sin().square()
    }
}

/// `kaiser_sinc_filter1d(0.5 / ratio, 0.6 / ratio, k)`: BigVGAN's low-pass for ×`ratio`.
fn kaiser_sinc(ratio: i64, k: i64, device: Device) -> Tensor {
    let (cutoff, half_width) = (0.5 / ratio as f64, 0.6 / ratio as f64);
    let half = k / 2;
    let amplitude = 2.285 * (half - 1) as f64 * std::f64::consts::PI * 4.0 * half_width + 7.95;
    let beta = if amplitude > 50.0 {
        0.1102 * (amplitude - 8.7)
    } else if amplitude >= 21.0 {
        0.5842 * (amplitude - 21.0).powf(0.4) + 0.07886 * (amplitude - 21.0)
    } else {
        0.0
    };
    let window = Tensor::kaiser_window_beta(k, false, beta, (Kind::Float, Device::Cpu));
    let time = match k % 2 {
        0 => Tensor::arange_start(-half, half, (Kind::Float, Device::Cpu)) + 0.5,
        _ => Tensor::arange(k, (Kind::Float, Device::Cpu)) - half as f64,
    };
    let t = time * (2.0 * cutoff);
    let sinc = (&t * std::f64::consts::PI).sin() / std::f64::consts::PI / &t;
    let sinc = sinc.where_self(&t.ne(0.0), &t.ones_like());
    let f = window * sinc * (2.0 * cutoff);
    (&f / f.sum(Kind::Float)).to_device(device)
}

/// The anti-aliased activation: ×`ratio` (transposed convolution with the low-pass), the
/// activation, the low-pass again with stride `ratio`.
struct AntiAlias {
    act: Snake,
    up: Tensor,
    down: Tensor,
    ratio: i64,
}

impl AntiAlias {
    fn new(act: Snake, ratio: i64, k: i64, w: &Weights) -> Result<Self> {
        // Checkpoints carry the filters as buffers; computed only where one does not.
        let filter = |name: &str| -> Result<Tensor> {
            let key = format!("{name}.filter");
            match w.contains(&key) {
                true => w.get(&key, &[1, 1, k]),
                false => Ok(kaiser_sinc(ratio, k, w.device()).to_kind(w.kind()).view([1, 1, k])),
            }
        };
        Ok(Self { act, up: filter("upsample")?, down: filter("downsample")?, ratio })
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        let (c, k, r) = (x.size()[1], self.up.size()[2], self.ratio);
        // Up: replicate-pad, transposed conv, trim.
        let pad = k / r - 1;
        let (left, right) = (pad * r + (k - r) / 2, pad * r + (k - r + 1) / 2);
        let y = x.pad([pad, pad], "replicate", None);
        let y =
            y.conv_transpose1d(&self.up.expand([c, 1, k], false), None::<&Tensor>, [r], [0], [0], c, [1]) * r as f64;
        let n = y.size()[2];
        let y = self.act.forward(&y.narrow(2, left, n - left - right));
        // Down: replicate-pad, strided conv.
        let (left, right) = (k / 2 + k % 2 - 1, k / 2);
        y.pad([left, right], "replicate", None).conv1d(
            &self.down.expand([c, 1, k], false),
            None::<&Tensor>,
            [r],
            [0],
            [1],
            c,
        )
    }
}

/// One residual block's activation.
enum Act {
    Leaky(f64),
    Snake(Snake),
    AntiAlias(AntiAlias),
}

impl Act {
    fn forward(&self, x: &Tensor) -> Tensor {
        match self {
            Act::Leaky(slope) => leaky(x, *slope),
            Act::Snake(s) => s.forward(x),
            Act::AntiAlias(a) => a.forward(x),
        }
    }
}

/// `leaky_relu(x, slope)`.
fn leaky(x: &Tensor, slope: f64) -> Tensor {
    x.where_self(&x.gt(0.0), &(x * slope))
}

/// `ResBlock`: per dilation, act → dilated conv → act → conv, added to the input.
struct ResBlock {
    layers: Vec<(Act, Conv1d, Act, Conv1d)>,
}

impl ResBlock {
    fn new(w: &Weights, c: &GeneratorConfig, channels: i64, k: i64, dilations: &[i64]) -> Result<Self> {
        let act = |w: &Weights| -> Result<Act> {
            let inner = match c.act_fn.as_str() {
                "snakebeta" => Snake::new(&if c.antialias { w.pp("act") } else { w.clone() }, channels, true)?,
                "snake" => Snake::new(&if c.antialias { w.pp("act") } else { w.clone() }, channels, false)?,
                _ => return Ok(Act::Leaky(c.leaky_relu_negative_slope)),
            };
            Ok(match c.antialias {
                true => Act::AntiAlias(AntiAlias::new(inner, c.antialias_ratio, c.antialias_kernel_size, w)?),
                false => Act::Snake(inner),
            })
        };
        let layers = dilations
            .iter()
            .enumerate()
            .map(|(i, &d)| {
                Ok((
                    act(&w.pp("acts1").pp(i))?,
                    Conv1d::new(&w.pp("convs1").pp(i), channels, channels, k, d, true)?,
                    act(&w.pp("acts2").pp(i))?,
                    Conv1d::new(&w.pp("convs2").pp(i), channels, channels, k, 1, true)?,
                ))
            })
            .collect::<Result<_>>()?;
        Ok(Self { layers })
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        let mut x = x.shallow_clone();
        for (a1, c1, a2, c2) in &self.layers {
            let y = c2.forward(&a2.forward(&c1.forward(&a1.forward(&x))));
            x = &x + y;
        }
        x
    }
}

/// `LTX2Vocoder`: mel `[B, C, T, M]` → waveform `[B, out_channels, T · Π factors]`.
pub struct Generator {
    cfg: GeneratorConfig,
    conv_in: Conv1d,
    /// Transposed convolutions: weight `[in, out, k]`, bias, stride, padding.
    upsamplers: Vec<(Tensor, Tensor, i64, i64)>,
    resnets: Vec<ResBlock>,
    act_out: Act,
    conv_out: Conv1d,
}

impl Generator {
    fn new(w: &Weights, c: GeneratorConfig) -> Result<Self> {
        let mut channels = c.hidden_channels;
        let mut upsamplers = Vec::new();
        let mut resnets = Vec::new();
        for (i, (&stride, &k)) in c.upsample_factors.iter().zip(&c.upsample_kernel_sizes).enumerate() {
            let out = channels / 2;
            let u = w.pp("upsamplers").pp(i);
            upsamplers.push((u.get("weight", &[channels, out, k])?, u.get("bias", &[out])?, stride, (k - stride) / 2));
            for (j, (&rk, dil)) in c.resnet_kernel_sizes.iter().zip(&c.resnet_dilations).enumerate() {
                let idx = i * c.resnet_kernel_sizes.len() + j;
                resnets.push(ResBlock::new(&w.pp("resnets").pp(idx), &c, out, rk, dil)?);
            }
            channels = out;
        }
        let act_out = match c.act_fn.as_str() {
            // The reference's final LeakyReLU keeps torch's default slope.
            "leaky_relu" => Act::Leaky(0.01),
            _ => {
                let snake = Snake::new(&w.pp("act_out.act"), channels, true)?;
                Act::AntiAlias(AntiAlias::new(snake, c.antialias_ratio, c.antialias_kernel_size, &w.pp("act_out"))?)
            }
        };
        Ok(Self {
            conv_in: Conv1d::new(&w.pp("conv_in"), c.in_channels, c.hidden_channels, 7, 1, true)?,
            upsamplers,
            resnets,
            act_out,
            conv_out: Conv1d::new(&w.pp("conv_out"), channels, c.out_channels, 7, 1, c.final_bias)?,
            cfg: c,
        })
    }

    /// `mel [B, C, T, M]` → `[B, out_channels, samples]`.
    pub fn forward(&self, mel: &Tensor) -> Tensor {
        let c = &self.cfg;
        let mut x = self.conv_in.forward(&mel.transpose(2, 3).flatten(1, 2));
        let per = c.resnet_kernel_sizes.len();
        for (i, (w, b, stride, pad)) in self.upsamplers.iter().enumerate() {
            if c.act_fn == "leaky_relu" {
                x = leaky(&x, c.leaky_relu_negative_slope);
            }
            x = x.conv_transpose1d(w, Some(b), [*stride], [*pad], [0], 1, [1]);
            let outs: Vec<Tensor> = self.resnets[i * per..(i + 1) * per].iter().map(|r| r.forward(&x)).collect();
            x = Tensor::stack(&outs, 0).mean_dim(0, false, x.kind());
        }
        let x = self.conv_out.forward(&self.act_out.forward(&x));
        match c.final_act_fn.as_deref() {
            Some("tanh") => x.tanh(),
            Some("clamp") => x.clamp(-1.0, 1.0),
            _ => x,
        }
    }

    /// Samples out per mel frame in.
    pub fn upsampling(&self) -> i64 {
        self.cfg.upsample_factors.iter().product()
    }
}

/// LTX-2.3's band extension: the generator's mel spectrogram (a causal STFT whose bases the
/// checkpoint carries), a second generator on it, added to a Hann-windowed ×`ratio` resample.
struct BandExtension {
    generator: Generator,
    forward_basis: Tensor,
    mel_basis: Tensor,
    hop: i64,
    window: i64,
    resample: Tensor,
    ratio: i64,
    input_rate: i64,
    output_rate: i64,
}

impl BandExtension {
    /// The ×`ratio` resampler's kernel (`UpSample1d(window_type="hann")`).
    fn hann(ratio: i64, device: Device, kind: Kind) -> Tensor {
        let (rolloff, width_lp) = (0.99f64, 6.0f64);
        let width = (width_lp / rolloff).ceil() as i64;
        let k = 2 * width * ratio + 1;
        let t = (Tensor::arange(k, (Kind::Float, Device::Cpu)) / ratio as f64 - width as f64) * rolloff;
        let window = (t.clamp(-width_lp, width_lp) * std::f64::consts::PI / width_lp / 2.0).cos().square();
        (t.sinc() * window * rolloff / ratio as f64).view([1, 1, k]).to_device(device).to_kind(kind)
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        let (b, c, n) = (x.size()[0], x.size()[1], x.size()[2]);
        let rem = n % self.hop;
        let x = if rem != 0 { x.pad([0, self.hop - rem], "constant", Some(0.0)) } else { x.shallow_clone() };
        // Log-mel of the first waveform: causal (left-padded) STFT magnitudes through the mel basis.
        let wave = x.flatten(0, 1).unsqueeze(1);
        let wave = wave.pad([(self.window - self.hop).max(0), 0], "constant", Some(0.0));
        let spec = wave.conv1d(&self.forward_basis, None::<&Tensor>, [self.hop], [0], [1], 1);
        let f = spec.size()[1] / 2;
        let (re, im) = (spec.narrow(1, 0, f), spec.narrow(1, f, f));
        let magnitude = (re.square() + im.square()).sqrt();
        let mel = self.mel_basis.to_kind(magnitude.kind()).matmul(&magnitude).clamp_min(1e-5).log();
        let mel = mel.unflatten(0, [b, c]).transpose(2, 3);
        let residual = self.generator.forward(&mel);
        // The resampled first waveform.
        let r = self.ratio;
        let k = self.resample.size()[2];
        let width = ((6.0f64 / 0.99).ceil()) as i64;
        let (left, right) = (2 * width * r, k - r);
        let up = x.pad([width, width], "replicate", None).conv_transpose1d(
            &self.resample.expand([c, 1, k], false),
            None::<&Tensor>,
            [r],
            [0],
            [0],
            c,
            [1],
        ) * r as f64;
        let m = up.size()[2];
        let skip = up.narrow(2, left, m - left - right);
        let out = (residual + skip).clamp(-1.0, 1.0);
        out.narrow(2, 0, n * self.output_rate / self.input_rate)
    }
}

/// The vocoder of an LTX-2 folder.
pub struct Ltx2Vocoder {
    generator: Generator,
    bwe: Option<BandExtension>,
    /// Samples per second of the waveform it writes.
    pub sample_rate: i64,
}

// SAFETY: the weights are read-only after construction and libtorch kernels may read one
// tensor from several threads; nothing here mutates shared state.
unsafe impl Sync for Ltx2Vocoder {}

impl Ltx2Vocoder {
    /// Channels of the waveform it writes (2: stereo).
    pub fn channels(&self) -> u16 {
        match &self.bwe {
            Some(b) => b.generator.cfg.out_channels as u16,
            None => self.generator.cfg.out_channels as u16,
        }
    }

    /// Reads `dir` (`config.json` naming `LTX2Vocoder` or `LTX2VocoderWithBWE`, and the weights)
    /// onto `device` in `kind`.
    pub fn load(dir: &Path, device: Device, kind: Kind) -> Result<Self> {
        let path = dir.join("config.json");
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let class = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v.get("_class_name").and_then(|c| c.as_str()).map(String::from))
            .unwrap_or_default();
        let raw: RawConfig = read_config_with(&path, &[])?;
        let w = Weights::from_dir(dir, "diffusion_pytorch_model", device, kind)?;
        let v = match class.as_str() {
            "LTX2Vocoder" => {
                let g = generator_config(&raw, false, &path)?;
                let rate = raw.output_sampling_rate.unwrap_or(24000);
                Self { generator: Generator::new(&w, g)?, bwe: None, sample_rate: rate }
            }
            "LTX2VocoderWithBWE" => {
                let (g, e) = (generator_config(&raw, false, &path)?, generator_config(&raw, true, &path)?);
                let filter = raw.filter_length.unwrap_or(512);
                let input_rate = raw.input_sampling_rate.unwrap_or(16000);
                let output_rate = raw.output_sampling_rate.unwrap_or(48000);
                ensure!(
                    output_rate % input_rate == 0,
                    "{}: output_sampling_rate must be a multiple of input_sampling_rate",
                    path.display()
                );
                let freqs = filter / 2 + 1;
                let mel = raw.num_mel_channels.unwrap_or(64);
                let stft = w.pp("mel_stft");
                let ratio = output_rate / input_rate;
                let bwe = BandExtension {
                    generator: Generator::new(&w.pp("bwe_generator"), e)?,
                    forward_basis: stft.get("stft_fn.forward_basis", &[freqs * 2, 1, filter])?,
                    mel_basis: stft.get("mel_basis", &[mel, freqs])?,
                    hop: raw.hop_length.unwrap_or(80),
                    window: raw.window_length.unwrap_or(512),
                    resample: BandExtension::hann(ratio, device, kind),
                    ratio,
                    input_rate,
                    output_rate,
                };
                // The inverse basis is stored but not used by inference.
                let _ = stft.get("stft_fn.inverse_basis", &[freqs * 2, 1, filter]);
                Self { generator: Generator::new(&w.pp("vocoder"), g)?, bwe: Some(bwe), sample_rate: output_rate }
            }
            other => {
                return Err(unsupported(
                    &path,
                    "_class_name",
                    format!("{other:?}"),
                    "LTX2Vocoder or LTX2VocoderWithBWE",
                ))
            }
        };
        w.warn_unused("vocoder");
        Ok(v)
    }

    /// `mel [B, C, T, M]` (the audio VAE's output) → waveform `[B, channels, samples]` in [-1, 1].
    pub fn forward(&self, mel: &Tensor) -> Tensor {
        let x = self.generator.forward(mel);
        match &self.bwe {
            Some(b) => b.forward(&x),
            None => x,
        }
    }
}

/// The generator config from `raw` (the `bwe_` keys when `bwe`), with the reference's defaults.
fn generator_config(raw: &RawConfig, bwe: bool, path: &Path) -> Result<GeneratorConfig> {
    let with_bwe = raw.bwe_in_channels.is_some() || raw.hop_length.is_some() || raw.input_sampling_rate.is_some();
    macro_rules! pick {
        ($plain:ident, $b:ident, $default_plain:expr, $default_bwe_main:expr, $default_bwe:expr) => {
            match (bwe, with_bwe) {
                (true, _) => raw.$b.clone().unwrap_or($default_bwe),
                (false, true) => raw.$plain.clone().unwrap_or($default_bwe_main),
                (false, false) => raw.$plain.clone().unwrap_or($default_plain),
            }
        };
    }
    let dil = vec![vec![1, 3, 5]; 3];
    let c = GeneratorConfig {
        in_channels: pick!(in_channels, bwe_in_channels, 128, 128, 128),
        hidden_channels: pick!(hidden_channels, bwe_hidden_channels, 1024, 1536, 512),
        out_channels: pick!(out_channels, bwe_out_channels, 2, 2, 2),
        upsample_kernel_sizes: pick!(
            upsample_kernel_sizes,
            bwe_upsample_kernel_sizes,
            vec![16, 15, 8, 4, 4],
            vec![11, 4, 4, 4, 4, 4],
            vec![12, 11, 4, 4, 4]
        ),
        upsample_factors: pick!(
            upsample_factors,
            bwe_upsample_factors,
            vec![6, 5, 2, 2, 2],
            vec![5, 2, 2, 2, 2, 2],
            vec![6, 5, 2, 2, 2]
        ),
        resnet_kernel_sizes: pick!(
            resnet_kernel_sizes,
            bwe_resnet_kernel_sizes,
            vec![3, 7, 11],
            vec![3, 7, 11],
            vec![3, 7, 11]
        ),
        resnet_dilations: pick!(resnet_dilations, bwe_resnet_dilations, dil.clone(), dil.clone(), dil.clone()),
        act_fn: pick!(act_fn, bwe_act_fn, "leaky_relu".to_string(), "snakebeta".to_string(), "snakebeta".to_string()),
        leaky_relu_negative_slope: pick!(leaky_relu_negative_slope, bwe_leaky_relu_negative_slope, 0.1, 0.1, 0.1),
        antialias: pick!(antialias, bwe_antialias, false, true, true),
        antialias_ratio: pick!(antialias_ratio, bwe_antialias_ratio, 2, 2, 2),
        antialias_kernel_size: pick!(antialias_kernel_size, bwe_antialias_kernel_size, 12, 12, 12),
        final_act_fn: pick!(final_act_fn, bwe_final_act_fn, Some("tanh".to_string()), None, None),
        final_bias: pick!(final_bias, bwe_final_bias, true, false, false),
    };
    let key = |k: &str| if bwe { format!("bwe_{k}") } else { k.to_string() };
    if !["snakebeta", "snake", "leaky_relu"].contains(&c.act_fn.as_str()) {
        return Err(unsupported(path, &key("act_fn"), &c.act_fn, "snakebeta, snake or leaky_relu"));
    }
    if c.act_fn == "leaky_relu" && c.antialias {
        return Err(unsupported(path, &key("antialias"), true, "false with leaky_relu"));
    }
    if let Some(f) = c.final_act_fn.as_deref().filter(|f| !["tanh", "clamp"].contains(f)) {
        return Err(unsupported(path, &key("final_act_fn"), f, "tanh, clamp or null"));
    }
    ensure!(
        c.upsample_factors.len() == c.upsample_kernel_sizes.len()
            && c.resnet_kernel_sizes.len() == c.resnet_dilations.len(),
        "{}: the upsample and resnet lists must pair up",
        path.display()
    );
    Ok(c)
}
