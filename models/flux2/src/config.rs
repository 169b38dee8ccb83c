//! The configs of a FLUX.2 folder, read strictly: a key we do not implement is an error naming
//! it, a value we do not implement is refused naming the key.

use std::path::Path;

use anyhow::{bail, ensure, Context, Result};
use fastvideo_layers::config::{read_config, read_config_with, unsupported};
use serde::Deserialize;
use serde_json::Value;

/// `transformer/config.json` (diffusers `Flux2Transformer2DModel`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct TransformerConfig {
    #[serde(default = "defaults::one")]
    pub patch_size: i64,
    #[serde(default = "defaults::in_channels")]
    pub in_channels: i64,
    #[serde(default)]
    pub out_channels: Option<i64>,
    #[serde(default = "defaults::num_layers")]
    pub num_layers: usize,
    #[serde(default = "defaults::num_single_layers")]
    pub num_single_layers: usize,
    #[serde(default = "defaults::head_dim")]
    pub attention_head_dim: i64,
    #[serde(default = "defaults::heads")]
    pub num_attention_heads: i64,
    #[serde(default = "defaults::joint_attention_dim")]
    pub joint_attention_dim: i64,
    #[serde(default = "defaults::timestep_channels")]
    pub timestep_guidance_channels: i64,
    #[serde(default = "defaults::mlp_ratio")]
    pub mlp_ratio: f64,
    #[serde(default = "defaults::axes")]
    pub axes_dims_rope: Vec<i64>,
    #[serde(default = "defaults::rope_theta")]
    pub rope_theta: f64,
    #[serde(default = "defaults::eps")]
    pub eps: f64,
    #[serde(default = "defaults::yes")]
    pub guidance_embeds: bool,
}

impl TransformerConfig {
    /// Reads and checks `path`.
    pub fn load(path: &Path) -> Result<Self> {
        let c: Self = read_config(path)?;
        if c.patch_size != 1 {
            return Err(unsupported(path, "patch_size", c.patch_size, "FLUX.2 packs 2x2 patches outside: 1"));
        }
        let rope: i64 = c.axes_dims_rope.iter().sum();
        ensure!(
            rope == c.attention_head_dim && c.axes_dims_rope.iter().all(|d| d % 2 == 0),
            "{}: `axes_dims_rope` {:?} must be even and sum to attention_head_dim {}",
            path.display(),
            c.axes_dims_rope,
            c.attention_head_dim
        );
        Ok(c)
    }

    /// Width of the residual stream.
    pub fn inner_dim(&self) -> i64 {
        self.num_attention_heads * self.attention_head_dim
    }

    /// Channels the model predicts per token.
    pub fn out_channels(&self) -> i64 {
        self.out_channels.unwrap_or(self.in_channels)
    }

    /// Hidden width of the feed-forward (before SwiGLU halves the doubled projection).
    pub fn mlp_hidden(&self) -> i64 {
        (self.inner_dim() as f64 * self.mlp_ratio) as i64
    }
}

/// `vae/config.json` (diffusers `AutoencoderKLFlux2`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct VaeConfig {
    #[serde(default = "defaults::rgb")]
    pub in_channels: i64,
    #[serde(default = "defaults::rgb")]
    pub out_channels: i64,
    pub down_block_types: Vec<String>,
    pub up_block_types: Vec<String>,
    pub block_out_channels: Vec<i64>,
    #[serde(default)]
    pub decoder_block_out_channels: Option<Vec<i64>>,
    #[serde(default = "defaults::layers_per_block")]
    pub layers_per_block: i64,
    #[serde(default = "defaults::silu")]
    pub act_fn: String,
    #[serde(default = "defaults::latent_channels")]
    pub latent_channels: i64,
    #[serde(default = "defaults::groups")]
    pub norm_num_groups: i64,
    #[serde(default = "defaults::yes")]
    pub use_quant_conv: bool,
    #[serde(default = "defaults::yes")]
    pub use_post_quant_conv: bool,
    #[serde(default = "defaults::yes")]
    pub mid_block_add_attention: bool,
    #[serde(default = "defaults::bn_eps")]
    pub batch_norm_eps: f64,
    #[serde(default = "defaults::patch")]
    pub patch_size: Vec<i64>,
}

impl VaeConfig {
    /// Reads and checks `path`. `sample_size` and `batch_norm_momentum` only matter to tiling
    /// and training.
    pub fn load(path: &Path) -> Result<Self> {
        let c: Self = read_config_with(path, &[&["sample_size", "batch_norm_momentum", "force_upcast"]])?;
        if c.act_fn != "silu" {
            return Err(unsupported(path, "act_fn", &c.act_fn, "silu"));
        }
        for t in &c.down_block_types {
            if t != "DownEncoderBlock2D" {
                return Err(unsupported(path, "down_block_types", t, "DownEncoderBlock2D"));
            }
        }
        for t in &c.up_block_types {
            if t != "UpDecoderBlock2D" {
                return Err(unsupported(path, "up_block_types", t, "UpDecoderBlock2D"));
            }
        }
        ensure!(
            c.down_block_types.len() == c.block_out_channels.len()
                && c.up_block_types.len() == c.decoder_channels().len(),
            "{}: one block type per entry of block_out_channels",
            path.display()
        );
        if c.patch_size != [2, 2] {
            return Err(unsupported(path, "patch_size", format!("{:?}", c.patch_size), "[2, 2]"));
        }
        Ok(c)
    }

    /// The decoder's channels (the encoder's unless given).
    pub fn decoder_channels(&self) -> &[i64] {
        self.decoder_block_out_channels.as_deref().unwrap_or(&self.block_out_channels)
    }

    /// Pixels per latent cell: `2^(levels - 1)`.
    pub fn scale_factor(&self) -> i64 {
        1 << (self.block_out_channels.len() - 1)
    }
}

/// `model_index.json`: the pipeline class and `is_distilled` (a step-distilled model ignores
/// guidance).
#[derive(Clone, Debug)]
pub struct PipelineConfig {
    /// The model bakes guidance in: classifier-free guidance never runs.
    pub is_distilled: bool,
}

impl PipelineConfig {
    /// Reads `path`; a folder of another pipeline is refused naming its class.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let v: Value = serde_json::from_str(&text).with_context(|| format!("{}: not valid JSON", path.display()))?;
        let class = v.get("_class_name").and_then(Value::as_str).unwrap_or("");
        ensure!(class == "Flux2KleinPipeline", "{}: `_class_name` {class:?} is not Flux2KleinPipeline", path.display());
        let is_distilled = match v.get("is_distilled") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => bail!("{}: `is_distilled` = {other} must be true or false", path.display()),
        };
        Ok(Self { is_distilled })
    }
}

mod defaults {
    pub fn one() -> i64 {
        1
    }
    pub fn in_channels() -> i64 {
        128
    }
    pub fn num_layers() -> usize {
        8
    }
    pub fn num_single_layers() -> usize {
        48
    }
    pub fn head_dim() -> i64 {
        128
    }
    pub fn heads() -> i64 {
        48
    }
    pub fn joint_attention_dim() -> i64 {
        15360
    }
    pub fn timestep_channels() -> i64 {
        256
    }
    pub fn mlp_ratio() -> f64 {
        3.0
    }
    pub fn axes() -> Vec<i64> {
        vec![32, 32, 32, 32]
    }
    pub fn rope_theta() -> f64 {
        2000.0
    }
    pub fn eps() -> f64 {
        1e-6
    }
    pub fn yes() -> bool {
        true
    }
    pub fn rgb() -> i64 {
        3
    }
    pub fn layers_per_block() -> i64 {
        2
    }
    pub fn silu() -> String {
        "silu".into()
    }
    pub fn latent_channels() -> i64 {
        32
    }
    pub fn groups() -> i64 {
        32
    }
    pub fn bn_eps() -> f64 {
        1e-4
    }
    pub fn patch() -> Vec<i64> {
        vec![2, 2]
    }
}
