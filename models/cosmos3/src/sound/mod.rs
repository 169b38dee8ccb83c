//! Cosmos3's sound tokenizer (diffusers `Cosmos3AVAEAudioTokenizer`, the folder's
//! `sound_tokenizer/`): an Oobleck decoder that turns the transformer's sound latents into a
//! waveform, and a SpecConvNeXt encoder that turns an input waveform into latents (the
//! posterior's mean: the deterministic path, what diffusers' `forward` decodes by default).

pub mod config;
mod conv;
mod decoder;
mod encoder;
mod snake;

use std::path::Path;

use anyhow::{ensure, Context, Result};
use fastvideo_torch::weights::Weights;
use tch::{Device, Kind, Tensor};

pub use config::SoundTokenizerConfig;
use decoder::Decoder;
use encoder::Encoder;

/// The dtype load-time folds (weight norm, Snake's exponentials) run in: float32, or float64
/// for a float64 model, so folding never costs a float64 model precision.
fn fold_kind(kind: Kind) -> Kind {
    if kind == Kind::Double {
        Kind::Double
    } else {
        Kind::Float
    }
}

/// The loaded tokenizer.
pub struct SoundTokenizer {
    config: SoundTokenizerConfig,
    decoder: Decoder,
    /// `None` for decoder-only checkpoints (diffusers disables the encoder when the folder has
    /// no `encoder.*` tensors).
    encoder: Option<Encoder>,
    kind: Kind,
}

// SAFETY: every tensor is written once at load and only read afterwards; libtorch allows
// concurrent reads of a tensor from several threads.
unsafe impl Sync for SoundTokenizer {}

impl SoundTokenizer {
    /// Reads `dir/config.json` and `dir/diffusion_pytorch_model.safetensors` onto `device` in
    /// `kind`.
    pub fn load(dir: &Path, device: Device, kind: Kind) -> Result<Self> {
        let config = SoundTokenizerConfig::load(&dir.join("config.json"))?;
        let w = Weights::from_dir(dir, "diffusion_pytorch_model", device, kind)?;
        let decoder = Decoder::new(&w.pp("decoder"), &config).context("sound tokenizer decoder")?;
        let enc = w.pp("encoder");
        let encoder = if config.encoder_enabled && enc.contains("layers.0.weight_v") {
            Some(Encoder::new(&enc, &config).context("sound tokenizer encoder")?)
        } else {
            None
        };
        w.warn_unused("sound_tokenizer");
        Ok(Self { config, decoder, encoder, kind })
    }

    /// The architecture read from the folder.
    pub fn config(&self) -> &SoundTokenizerConfig {
        &self.config
    }

    /// Waveform samples per latent step.
    pub fn hop(&self) -> i64 {
        self.config.hop()
    }

    /// Waveform samples per second.
    pub fn sample_rate(&self) -> i64 {
        self.config.sampling_rate
    }

    /// Channels of the decoded waveform (2: stereo).
    pub fn channels(&self) -> i64 {
        self.config.dec_out_channels
    }

    /// Latent channels (the transformer's `sound_dim`).
    pub fn latent_channels(&self) -> i64 {
        self.config.vocoder_input_dim
    }

    /// The waveform `[B, channels, T·hop]` of `latent [B, C, T]`, clamped to [-1, 1] as
    /// diffusers' `decode`; in the tokenizer's dtype.
    pub fn decode(&self, latent: &Tensor) -> Result<Tensor> {
        let c = self.latent_channels();
        ensure!(
            latent.dim() == 3 && latent.size()[1] == c,
            "sound latent must be [B, {c}, T], got {:?}",
            latent.size()
        );
        Ok(self.decoder.forward(&latent.to_kind(self.kind)).clamp(-1.0, 1.0))
    }

    /// The posterior mean `[B, C, T]` of `waveform [B, channels, N]`, as diffusers'
    /// `encode(...).latent_dist.mode()` in eval mode: the whole batch peak-normalised to 0.95
    /// (when `normalize_volume`), right-padded with zeros to a multiple of the hop (`T` is
    /// `N / hop` once padded, for the shipped configs).
    pub fn encode(&self, waveform: &Tensor) -> Result<Tensor> {
        let Some(encoder) = &self.encoder else {
            anyhow::bail!("this sound tokenizer was loaded from decoder-only weights and cannot encode audio");
        };
        ensure!(waveform.dim() == 3, "waveform must be [B, channels, N], got {:?}", waveform.size());
        let mut x = waveform.shallow_clone();
        if self.config.normalize_volume {
            x = &x / (x.abs().max() + 1e-5) * 0.95;
        }
        let n = x.size()[2];
        let hop = self.hop();
        let pad = (hop - n % hop) % hop;
        if pad > 0 {
            x = x.constant_pad_nd([0, pad]);
        }
        let moments = encoder.forward(&x.to_kind(self.kind))?;
        Ok(moments.narrow(1, 0, self.latent_channels()))
    }
}
