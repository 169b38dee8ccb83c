//! `sound_tokenizer/config.json` of a Cosmos3 folder (diffusers `Cosmos3AVAEAudioTokenizer`),
//! read strictly. diffusers implements one shipped AVAE layout and raises `NotImplementedError`
//! for any other value of its switches; those keys are refused here the same way, naming the key,
//! so a checkpoint of another layout never runs as this one.

use std::path::Path;

use anyhow::{Context, Result};
use fastvideo_layers::config::{read_config_with, unsupported};
use serde::Deserialize;
use serde_json::Value;

/// The tokenizer's architecture; fields are the config keys, defaults diffusers'.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[allow(missing_docs)]
pub struct SoundTokenizerConfig {
    pub sampling_rate: i64,
    pub vocoder_input_dim: i64,
    pub dec_dim: i64,
    pub dec_c_mults: Vec<i64>,
    pub dec_strides: Vec<i64>,
    pub dec_out_channels: i64,
    pub stereo: bool,
    pub use_wav_as_input: bool,
    pub normalize_volume: bool,
    pub hop_size: Option<i64>,
    pub input_channels: i64,
    pub enc_type: String,
    pub enc_dim: i64,
    pub enc_num_blocks: i64,
    pub enc_n_fft: i64,
    pub enc_hop_length: i64,
    pub enc_latent_dim: i64,
    pub enc_c_mults: Vec<i64>,
    pub enc_strides: Vec<i64>,
    pub enc_use_snake: bool,
    pub dec_type: String,
    pub dec_use_snake: bool,
    pub dec_final_tanh: bool,
    pub dec_anti_aliasing: bool,
    pub dec_use_nearest_upsample: bool,
    pub dec_use_tanh_at_final: bool,
    pub bottleneck_type: String,
    pub bottleneck: Option<Value>,
    pub activation: String,
    pub snake_logscale: bool,
    pub anti_aliasing: bool,
    pub use_cuda_kernel: bool,
    pub causal: bool,
    pub padding_mode: String,
    pub latent_mean: Option<Value>,
    pub latent_std: Option<Value>,
    pub encoder_enabled: bool,
}

impl Default for SoundTokenizerConfig {
    fn default() -> Self {
        Self {
            sampling_rate: 48_000,
            vocoder_input_dim: 64,
            dec_dim: 320,
            dec_c_mults: vec![1, 2, 4, 8, 16],
            dec_strides: vec![2, 4, 5, 6, 8],
            dec_out_channels: 2,
            stereo: true,
            use_wav_as_input: true,
            normalize_volume: true,
            hop_size: None,
            input_channels: 1,
            enc_type: "spec_convnext".into(),
            enc_dim: 192,
            enc_num_blocks: 2,
            enc_n_fft: 64,
            enc_hop_length: 16,
            enc_latent_dim: 128,
            enc_c_mults: vec![1, 2, 4],
            enc_strides: vec![4, 5, 6],
            enc_use_snake: true,
            dec_type: "oobleck".into(),
            dec_use_snake: true,
            dec_final_tanh: false,
            dec_anti_aliasing: false,
            dec_use_nearest_upsample: false,
            dec_use_tanh_at_final: false,
            bottleneck_type: "vae".into(),
            bottleneck: None,
            activation: "snakebeta".into(),
            snake_logscale: true,
            anti_aliasing: false,
            use_cuda_kernel: false,
            causal: false,
            padding_mode: "zeros".into(),
            latent_mean: None,
            latent_std: None,
            encoder_enabled: true,
        }
    }
}

/// Keys diffusers stores but never reads at inference: `enc_intermediate_dim` and
/// `enc_num_layers` (the ConvNeXt width and depth derive from other keys) and
/// `enc_identity_init` (an initialisation choice, overwritten by the weights).
const INERT: &[&str] = &["enc_intermediate_dim", "enc_num_layers", "enc_identity_init"];

impl SoundTokenizerConfig {
    /// Reads and checks `path`.
    pub fn load(path: &Path) -> Result<Self> {
        let c: Self = read_config_with(path, &[INERT])?;
        check_model_type(path)?;
        c.check(path)?;
        Ok(c)
    }

    /// Waveform samples per latent step: `hop_size`, else the product of the decoder's strides.
    pub fn hop(&self) -> i64 {
        self.hop_size.unwrap_or_else(|| self.dec_strides.iter().product())
    }

    /// Waveform channels the encoder reads (`input_channels`, doubled for stereo).
    pub fn encoder_channels(&self) -> i64 {
        self.input_channels * if self.stereo { 2 } else { 1 }
    }

    /// Refuses every value diffusers refuses, and shapes its layers could not run with.
    fn check(&self, path: &Path) -> Result<()> {
        let fixed: [(&str, bool, &dyn std::fmt::Display, &str); 14] = [
            ("use_wav_as_input", self.use_wav_as_input, &self.use_wav_as_input, "true: waveform input only"),
            ("enc_type", self.enc_type == "spec_convnext", &self.enc_type, "spec_convnext"),
            ("bottleneck_type", self.bottleneck_type == "vae", &self.bottleneck_type, "vae"),
            ("dec_type", self.dec_type == "oobleck", &self.dec_type, "oobleck"),
            ("dec_use_snake", self.dec_use_snake, &self.dec_use_snake, "true"),
            ("dec_final_tanh", !self.dec_final_tanh, &self.dec_final_tanh, "false"),
            ("dec_anti_aliasing", !self.dec_anti_aliasing, &self.dec_anti_aliasing, "false"),
            ("dec_use_nearest_upsample", !self.dec_use_nearest_upsample, &self.dec_use_nearest_upsample, "false"),
            ("dec_use_tanh_at_final", !self.dec_use_tanh_at_final, &self.dec_use_tanh_at_final, "false"),
            ("activation", self.activation == "snakebeta", &self.activation, "snakebeta"),
            ("snake_logscale", self.snake_logscale, &self.snake_logscale, "true"),
            ("anti_aliasing", !self.anti_aliasing, &self.anti_aliasing, "false"),
            ("use_cuda_kernel", !self.use_cuda_kernel, &self.use_cuda_kernel, "false"),
            ("causal", !(self.causal && self.encoder_enabled), &self.causal, "false: the encoder is not causal"),
        ];
        if let Some((key, _, value, supported)) = fixed.iter().find(|(_, ok, _, _)| !ok) {
            return Err(unsupported(path, key, value, supported));
        }
        if let Some(b) = &self.bottleneck {
            let kind = b.as_object().map(|o| o.get("type").and_then(Value::as_str).unwrap_or(&self.bottleneck_type));
            if kind != Some("vae") {
                return Err(unsupported(path, "bottleneck", b, "null or an object of type vae"));
            }
        }
        for (key, v) in [("latent_mean", &self.latent_mean), ("latent_std", &self.latent_std)] {
            if let Some(v) = v {
                return Err(unsupported(path, key, v, "null: no latent normalisation, as diffusers"));
            }
        }
        if self.dec_c_mults.len() != self.dec_strides.len() || self.dec_strides.iter().any(|s| *s < 1) {
            let v = format!("{:?}", self.dec_c_mults);
            return Err(unsupported(path, "dec_c_mults", v, "one multiplier per positive decoder stride"));
        }
        if self.hop() < 1 {
            return Err(unsupported(path, "hop_size", self.hop(), "a positive sample count"));
        }
        if !self.encoder_enabled {
            return Ok(());
        }
        if self.enc_c_mults.len() != self.enc_strides.len() || self.enc_strides.iter().any(|s| *s < 1) {
            let v = format!("{:?}", self.enc_c_mults);
            return Err(unsupported(path, "enc_c_mults", v, "one multiplier per positive encoder stride"));
        }
        if self.padding_mode != "zeros" {
            return Err(unsupported(path, "padding_mode", &self.padding_mode, "zeros"));
        }
        if self.enc_n_fft % 2 != 0 || self.enc_hop_length < 1 || self.enc_hop_length > self.enc_n_fft {
            let v = format!("{} (hop {})", self.enc_n_fft, self.enc_hop_length);
            return Err(unsupported(path, "enc_n_fft", v, "even, at least enc_hop_length"));
        }
        if self.enc_latent_dim != 2 * self.vocoder_input_dim {
            let supported = "2 · vocoder_input_dim: the posterior's mean and scale, the mean what the decoder reads";
            return Err(unsupported(path, "enc_latent_dim", self.enc_latent_dim, supported));
        }
        Ok(())
    }
}

/// `model_type` is provenance to the shared reader (it drops it), but here it names the AVAE
/// variant, and diffusers implements only `autoencoder_v2`.
fn check_model_type(path: &Path) -> Result<()> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let value: Value = serde_json::from_str(&text).with_context(|| format!("{}: not valid JSON", path.display()))?;
    match value.get("model_type") {
        None => Ok(()),
        Some(Value::String(s)) if s == "autoencoder_v2" => Ok(()),
        Some(other) => Err(unsupported(path, "model_type", other, "autoencoder_v2")),
    }
}
