//! The Oobleck decoder (diffusers `Cosmos3AudioDecoder`): latent `[B, C, T]` → waveform
//! `[B, channels, T·hop]`. A k7 convolution widens the latent, then per upsampling stride a
//! SnakeBeta, a transposed convolution that multiplies the length by the stride exactly
//! (`output_padding = stride % 2`), and three dilated residual units; a last SnakeBeta and k7
//! convolution make the channels.

use anyhow::Result;
use fastvideo_torch::weights::Weights;
use tch::Tensor;

use super::config::SoundTokenizerConfig;
use super::conv::{Conv1d, ConvSpec};
use super::snake::Snake;

/// `x + conv_k1(snake(conv_k7_dilated(snake(x))))`, the length kept.
struct ResidualUnit {
    snake1: Snake,
    conv1: Conv1d,
    snake2: Snake,
    conv2: Conv1d,
}

impl ResidualUnit {
    fn new(w: &Weights, dim: i64, dilation: i64) -> Result<Self> {
        let conv1 = ConvSpec { dilation, ..ConvSpec::new(dim, dim, 7, 3 * dilation) };
        Ok(Self {
            snake1: Snake::new(&w.pp("snake1"), dim)?,
            conv1: Conv1d::weight_norm(&w.pp("conv1"), conv1)?,
            snake2: Snake::new(&w.pp("snake2"), dim)?,
            conv2: Conv1d::weight_norm(&w.pp("conv2"), ConvSpec::new(dim, dim, 1, 0))?,
        })
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        let y = self.conv2.forward(&self.snake2.forward(&self.conv1.forward(&self.snake1.forward(x))));
        x + y
    }
}

/// One upsampling stage: SnakeBeta, transposed convolution (`×stride`), residual units with
/// dilations 1, 3, 9.
struct Block {
    snake: Snake,
    up: Conv1d,
    units: [ResidualUnit; 3],
}

impl Block {
    fn new(w: &Weights, cin: i64, cout: i64, stride: i64) -> Result<Self> {
        let spec = ConvSpec { stride, ..ConvSpec::new(cin, cout, 2 * stride, (stride + 1) / 2) };
        let unit = |i: usize, d: i64| ResidualUnit::new(&w.pp(format!("res_unit{i}")), cout, d);
        Ok(Self {
            snake: Snake::new(&w.pp("snake1"), cin)?,
            up: Conv1d::weight_norm_transposed(&w.pp("conv_t1"), spec, stride % 2)?,
            units: [unit(1, 1)?, unit(2, 3)?, unit(3, 9)?],
        })
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        let x = self.up.forward(&self.snake.forward(x));
        self.units.iter().fold(x, |x, u| u.forward(&x))
    }
}

/// The decoder.
pub struct Decoder {
    conv_in: Conv1d,
    blocks: Vec<Block>,
    snake: Snake,
    conv_out: Conv1d,
}

impl Decoder {
    /// Reads `conv1`, `block.{i}`, `snake1`, `conv2` under `w` (the folder's `decoder.`).
    pub fn new(w: &Weights, c: &SoundTokenizerConfig) -> Result<Self> {
        // diffusers prepends multiplier 1 and walks the strides from the latent end: stage i
        // maps `dim·mults[n-i]` to `dim·mults[n-i-1]`.
        let mults: Vec<i64> = std::iter::once(1).chain(c.dec_c_mults.iter().copied()).collect();
        let n = c.dec_strides.len();
        let conv_in =
            Conv1d::weight_norm(&w.pp("conv1"), ConvSpec::new(c.vocoder_input_dim, c.dec_dim * mults[n], 7, 3))?;
        let blocks = c
            .dec_strides
            .iter()
            .rev()
            .enumerate()
            .map(|(i, &s)| Block::new(&w.pp("block").pp(i), c.dec_dim * mults[n - i], c.dec_dim * mults[n - i - 1], s))
            .collect::<Result<_>>()?;
        let out = ConvSpec { bias: false, ..ConvSpec::new(c.dec_dim, c.dec_out_channels, 7, 3) };
        Ok(Self {
            conv_in,
            blocks,
            snake: Snake::new(&w.pp("snake1"), c.dec_dim)?,
            conv_out: Conv1d::weight_norm(&w.pp("conv2"), out)?,
        })
    }

    /// The waveform of `latent [B, C, T]`, unclamped.
    pub fn forward(&self, latent: &Tensor) -> Tensor {
        let x = self.conv_in.forward(latent);
        let x = self.blocks.iter().fold(x, |x, b| b.forward(&x));
        self.conv_out.forward(&self.snake.forward(&x))
    }
}
