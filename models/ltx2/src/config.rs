//! `transformer/config.json` of an LTX-2 folder (diffusers `LTX2VideoTransformer3DModel`), read
//! strictly: an unknown key is an error naming it, a value we do not implement is refused
//! naming the key.

use std::path::Path;

use anyhow::Result;
use fastvideo_layers::config::{read_config_with, unsupported};
use serde::Deserialize;

/// How rotary positions pair a head's channels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RopeType {
    /// Adjacent channels `(2i, 2i + 1)` rotate together (LTX-2.0).
    Interleaved,
    /// Each head's first half rotates with its second half (LTX-2.3).
    Split,
}

/// The transformer's config; field names are diffusers'.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct TransformerConfig {
    #[serde(default = "d::c128")]
    pub in_channels: i64,
    #[serde(default)]
    pub out_channels: Option<i64>,
    #[serde(default = "d::one")]
    pub patch_size: i64,
    #[serde(default = "d::one")]
    pub patch_size_t: i64,
    #[serde(default = "d::h32")]
    pub num_attention_heads: i64,
    #[serde(default = "d::c128")]
    pub attention_head_dim: i64,
    #[serde(default = "d::c4096")]
    pub cross_attention_dim: i64,
    #[serde(default = "d::scales")]
    pub vae_scale_factors: [i64; 3],
    #[serde(default = "d::p20")]
    pub pos_embed_max_pos: i64,
    #[serde(default = "d::b2048")]
    pub base_height: i64,
    #[serde(default = "d::b2048")]
    pub base_width: i64,
    #[serde(default)]
    pub gated_attn: bool,
    #[serde(default)]
    pub cross_attn_mod: bool,
    #[serde(default = "d::c128")]
    pub audio_in_channels: i64,
    #[serde(default)]
    pub audio_out_channels: Option<i64>,
    #[serde(default = "d::one")]
    pub audio_patch_size: i64,
    #[serde(default = "d::one")]
    pub audio_patch_size_t: i64,
    #[serde(default = "d::h32")]
    pub audio_num_attention_heads: i64,
    #[serde(default = "d::c64")]
    pub audio_attention_head_dim: i64,
    #[serde(default = "d::c2048")]
    pub audio_cross_attention_dim: i64,
    #[serde(default = "d::four")]
    pub audio_scale_factor: i64,
    #[serde(default = "d::p20")]
    pub audio_pos_embed_max_pos: i64,
    #[serde(default = "d::rate")]
    pub audio_sampling_rate: i64,
    #[serde(default = "d::hop")]
    pub audio_hop_length: i64,
    #[serde(default)]
    pub audio_gated_attn: bool,
    #[serde(default)]
    pub audio_cross_attn_mod: bool,
    #[serde(default = "d::layers")]
    pub num_layers: usize,
    #[serde(default = "d::gelu")]
    pub activation_fn: String,
    #[serde(default = "d::qk_norm")]
    pub qk_norm: String,
    #[serde(default)]
    pub norm_elementwise_affine: bool,
    #[serde(default = "d::eps")]
    pub norm_eps: f64,
    #[serde(default = "d::caption")]
    pub caption_channels: i64,
    #[serde(default = "d::yes")]
    pub attention_bias: bool,
    #[serde(default = "d::yes")]
    pub attention_out_bias: bool,
    #[serde(default = "d::theta")]
    pub rope_theta: f64,
    #[serde(default = "d::yes")]
    pub rope_double_precision: bool,
    #[serde(default = "d::one")]
    pub causal_offset: i64,
    #[serde(default = "d::thousand")]
    pub timestep_scale_multiplier: i64,
    #[serde(default = "d::thousand")]
    pub cross_attn_timestep_scale_multiplier: i64,
    #[serde(default = "d::interleaved")]
    pub rope_type: RopeType,
    #[serde(default = "d::yes")]
    pub use_prompt_embeddings: bool,
    #[serde(default)]
    pub perturbed_attn: bool,
    #[serde(default = "d::yes")]
    pub ff_bias: bool,
    #[serde(default = "d::yes")]
    pub audio_ff_bias: bool,
    #[serde(default = "d::yes")]
    pub use_prompt_adaln_single: bool,
    #[serde(default)]
    pub use_keyframes_abs_pos_embedding: bool,
}

mod d {
    pub fn one() -> i64 {
        1
    }
    pub fn four() -> i64 {
        4
    }
    pub fn h32() -> i64 {
        32
    }
    pub fn c64() -> i64 {
        64
    }
    pub fn c128() -> i64 {
        128
    }
    pub fn c2048() -> i64 {
        2048
    }
    pub fn c4096() -> i64 {
        4096
    }
    pub fn caption() -> i64 {
        3840
    }
    pub fn scales() -> [i64; 3] {
        [8, 32, 32]
    }
    pub fn p20() -> i64 {
        20
    }
    pub fn b2048() -> i64 {
        2048
    }
    pub fn rate() -> i64 {
        16000
    }
    pub fn hop() -> i64 {
        160
    }
    pub fn layers() -> usize {
        48
    }
    pub fn gelu() -> String {
        "gelu-approximate".into()
    }
    pub fn qk_norm() -> String {
        "rms_norm_across_heads".into()
    }
    pub fn eps() -> f64 {
        1e-6
    }
    pub fn yes() -> bool {
        true
    }
    pub fn theta() -> f64 {
        10000.0
    }
    pub fn thousand() -> i64 {
        1000
    }
    pub fn interleaved() -> super::RopeType {
        super::RopeType::Interleaved
    }
}

impl TransformerConfig {
    /// Reads and checks `path`.
    pub fn load(path: &Path) -> Result<Self> {
        let c: Self = read_config_with(path, &[])?;
        if c.activation_fn != "gelu-approximate" {
            return Err(unsupported(path, "activation_fn", &c.activation_fn, "gelu-approximate"));
        }
        if c.qk_norm != "rms_norm_across_heads" {
            return Err(unsupported(path, "qk_norm", &c.qk_norm, "rms_norm_across_heads"));
        }
        for (key, v) in [
            ("patch_size", c.patch_size),
            ("patch_size_t", c.patch_size_t),
            ("audio_patch_size", c.audio_patch_size),
            ("audio_patch_size_t", c.audio_patch_size_t),
        ] {
            if v != 1 {
                return Err(unsupported(path, key, v, "1: LTX-2 latents are one token per cell"));
            }
        }
        if c.use_keyframes_abs_pos_embedding {
            return Err(unsupported(path, "use_keyframes_abs_pos_embedding", true, "false (LTX-2.5 keyframes)"));
        }
        if c.use_prompt_embeddings && c.cross_attention_dim != c.inner_dim() {
            return Err(unsupported(
                path,
                "cross_attention_dim",
                c.cross_attention_dim,
                "the video width (heads × head dim): the caption projection gives the text that width",
            ));
        }
        if c.audio_cross_attention_dim != c.audio_inner_dim() {
            return Err(unsupported(
                path,
                "audio_cross_attention_dim",
                c.audio_cross_attention_dim,
                "the audio width (audio heads × audio head dim), which the audio-video attention runs at",
            ));
        }
        Ok(c)
    }

    /// Width of the video stream.
    pub fn inner_dim(&self) -> i64 {
        self.num_attention_heads * self.attention_head_dim
    }

    /// Width of the audio stream.
    pub fn audio_inner_dim(&self) -> i64 {
        self.audio_num_attention_heads * self.audio_attention_head_dim
    }

    /// Channels predicted per video token.
    pub fn out_channels(&self) -> i64 {
        self.out_channels.unwrap_or(self.in_channels)
    }

    /// Channels predicted per audio token.
    pub fn audio_out_channels(&self) -> i64 {
        self.audio_out_channels.unwrap_or(self.audio_in_channels)
    }

    /// Whether the text cross-attentions take their own modulation (LTX-2.3).
    pub fn prompt_modulation(&self) -> bool {
        self.cross_attn_mod || self.audio_cross_attn_mod
    }
}
