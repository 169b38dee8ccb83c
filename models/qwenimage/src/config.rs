//! `transformer/config.json` of a Qwen-Image folder (diffusers `QwenImageTransformer2DModel`),
//! read strictly: a key we do not implement is an error naming it.

use std::path::Path;

use anyhow::{ensure, Result};
use fastvideo_layers::config::{read_config, unsupported};
use serde::Deserialize;

/// The transformer's architecture; fields are the config keys.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct TransformerConfig {
    #[serde(default = "defaults::patch")]
    pub patch_size: i64,
    #[serde(default = "defaults::in_channels")]
    pub in_channels: i64,
    #[serde(default = "defaults::out_channels")]
    pub out_channels: Option<i64>,
    #[serde(default = "defaults::layers")]
    pub num_layers: usize,
    #[serde(default = "defaults::head_dim")]
    pub attention_head_dim: i64,
    #[serde(default = "defaults::heads")]
    pub num_attention_heads: i64,
    #[serde(default = "defaults::joint")]
    pub joint_attention_dim: i64,
    #[serde(default)]
    pub guidance_embeds: bool,
    #[serde(default = "defaults::axes")]
    pub axes_dims_rope: [i64; 3],
    #[serde(default)]
    pub zero_cond_t: bool,
    #[serde(default)]
    pub use_additional_t_cond: bool,
    #[serde(default)]
    pub use_layer3d_rope: bool,
}

impl TransformerConfig {
    /// Reads and checks `path`.
    pub fn load(path: &Path) -> Result<Self> {
        let c: Self = read_config(path)?;
        for (key, on, what) in [
            ("guidance_embeds", c.guidance_embeds, "a guidance-distilled model"),
            ("use_additional_t_cond", c.use_additional_t_cond, "Qwen-Image-Layered"),
            ("use_layer3d_rope", c.use_layer3d_rope, "Qwen-Image-Layered"),
        ] {
            if on {
                return Err(unsupported(path, key, true, &format!("false ({what} is not served yet)")));
            }
        }
        ensure!(
            c.axes_dims_rope.iter().sum::<i64>() == c.attention_head_dim && c.axes_dims_rope.iter().all(|d| d % 2 == 0),
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
    pub fn out_per_token(&self) -> i64 {
        self.patch_size * self.patch_size * self.out_channels.unwrap_or(self.in_channels)
    }
}

mod defaults {
    pub fn patch() -> i64 {
        2
    }
    pub fn in_channels() -> i64 {
        64
    }
    pub fn out_channels() -> Option<i64> {
        Some(16)
    }
    pub fn layers() -> usize {
        60
    }
    pub fn head_dim() -> i64 {
        128
    }
    pub fn heads() -> i64 {
        24
    }
    pub fn joint() -> i64 {
        3584
    }
    pub fn axes() -> [i64; 3] {
        [16, 56, 56]
    }
}
