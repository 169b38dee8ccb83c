//! The SpecConvNeXt encoder (diffusers `Cosmos3AudioSpectrogramConvNeXtEncoder`): waveform
//! `[B, channels, N]` → posterior moments `[B, 2·C, T]`. Each channel's STFT (Hann window,
//! `center=False` after a symmetric zero pad of `n_fft − hop`, one-sided) gives `[real; imag]`
//! features, channels stacked; a k1 convolution, then per stage ConvNeXt blocks and a strided
//! convolution, then a k1 convolution to the moments.

use anyhow::Result;
use fastvideo_torch::weights::Weights;
use tch::{Kind, Tensor};

use super::config::SoundTokenizerConfig;
use super::conv::{Conv1d, ConvSpec};
use super::snake::Snake;

/// The ConvNeXt block's activation: SnakeBeta, or exact GELU when `enc_use_snake` is false.
enum Act {
    Snake(Snake),
    Gelu,
}

/// `x + pw2(act(pw1(layernorm(dwconv_k7(x)))))`, the norm over channels in float32 without
/// bias (diffusers `FP32LayerNorm(bias=False)`).
struct ConvNeXtBlock {
    dwconv: Conv1d,
    norm: Tensor,
    pwconv1: Conv1d,
    act: Act,
    pwconv2: Conv1d,
}

impl ConvNeXtBlock {
    fn new(w: &Weights, dim: i64, snake: bool) -> Result<Self> {
        let inner = 4 * dim;
        let dw = ConvSpec { groups: dim, ..ConvSpec::new(dim, dim, 7, 3) };
        let act = if snake { Act::Snake(Snake::new(&w.pp("act"), inner)?) } else { Act::Gelu };
        Ok(Self {
            dwconv: Conv1d::plain(&w.pp("dwconv").pp(1), dw)?,
            norm: w.with_kind(Kind::Float).get("norm.weight", &[dim])?,
            pwconv1: Conv1d::plain(&w.pp("pwconv1"), ConvSpec::new(dim, inner, 1, 0))?,
            act,
            pwconv2: Conv1d::plain(&w.pp("pwconv2"), ConvSpec::new(inner, dim, 1, 0))?,
        })
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        let h = self.dwconv.forward(x).transpose(1, 2).to_kind(Kind::Float);
        let dim = self.norm.size()[0];
        let h = h.layer_norm([dim], Some(&self.norm), None::<&Tensor>, 1e-5, true);
        let h = self.pwconv1.forward(&h.to_kind(x.kind()).transpose(1, 2));
        let h = match &self.act {
            Act::Snake(s) => s.forward(&h),
            Act::Gelu => h.gelu("none"),
        };
        x + self.pwconv2.forward(&h)
    }
}

/// One layer of the encoder's sequence.
enum Layer {
    Conv(Conv1d),
    Block(ConvNeXtBlock),
}

/// The encoder.
pub struct Encoder {
    layers: Vec<Layer>,
    channels: i64,
    n_fft: i64,
    hop: i64,
}

impl Encoder {
    /// Reads `layers.{i}` under `w` (the folder's `encoder.`), numbered as diffusers'
    /// `nn.Sequential`.
    pub fn new(w: &Weights, c: &SoundTokenizerConfig) -> Result<Self> {
        let channels = c.encoder_channels();
        let dims: Vec<i64> = c.enc_c_mults.iter().map(|m| m * c.enc_dim).collect();
        let w = w.pp("layers");
        let mut layers = Vec::new();
        let features = (c.enc_n_fft + 2) * channels;
        let spec = ConvSpec { bias: false, ..ConvSpec::new(features, dims[0], 1, 0) };
        layers.push(Layer::Conv(Conv1d::weight_norm(&w.pp(0), spec)?));
        for (i, &stride) in c.enc_strides.iter().enumerate() {
            let (cin, cout) = (dims[i], *dims.get(i + 1).unwrap_or(&dims[i]));
            for _ in 0..c.enc_num_blocks {
                layers.push(Layer::Block(ConvNeXtBlock::new(&w.pp(layers.len()), cin, c.enc_use_snake)?));
            }
            let down = ConvSpec { stride, ..ConvSpec::new(cin, cout, 2 * stride, (stride + 1) / 2) };
            layers.push(Layer::Conv(Conv1d::weight_norm(&w.pp(layers.len()), down)?));
        }
        let last = *dims.last().expect("stages checked non-empty");
        let spec = ConvSpec { bias: false, ..ConvSpec::new(last, c.enc_latent_dim, 1, 0) };
        layers.push(Layer::Conv(Conv1d::weight_norm(&w.pp(layers.len()), spec)?));
        Ok(Self { layers, channels, n_fft: c.enc_n_fft, hop: c.enc_hop_length })
    }

    /// The moments of `audio [B, channels, N]` (already normalised and padded), in its dtype.
    pub fn forward(&self, audio: &Tensor) -> Result<Tensor> {
        let (b, ch, n) = audio.size3()?;
        anyhow::ensure!(ch == self.channels, "the sound encoder reads {} audio channels, got {ch}", self.channels);
        let x = self.spectrogram(&audio.reshape([b * ch, n]));
        let x = x.to_kind(audio.kind()).reshape([b, ch * (self.n_fft + 2), -1]);
        Ok(self.layers.iter().fold(x, |x, l| match l {
            Layer::Conv(c) => c.forward(&x),
            Layer::Block(blk) => blk.forward(&x),
        }))
    }

    /// `[real; imag]` of the one-sided STFT of each row of `x [R, N]`: `[R, n_fft + 2, frames]`,
    /// in float32 as diffusers computes it.
    fn spectrogram(&self, x: &Tensor) -> Tensor {
        let pad = self.n_fft - self.hop;
        let x = x.constant_pad_nd([pad / 2, pad - pad / 2]).to_kind(Kind::Float);
        let window = Tensor::hann_window(self.n_fft, (Kind::Float, x.device()));
        let s =
            x.stft_center(self.n_fft, self.hop, self.n_fft, Some(&window), false, "constant", false, true, true, false);
        let ri = s.view_as_real();
        Tensor::cat(&[ri.select(-1, 0), ri.select(-1, 1)], 1)
    }
}
