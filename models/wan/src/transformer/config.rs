//! `transformer/config.json`, checked against what this implementation runs.

use std::path::Path;

use anyhow::{ensure, Result};
use fastvideo_layers::config::{read_config, unsupported};
use serde::Deserialize;

/// `transformer/config.json`. Defaults are Wan2.1-T2V-14B's (diffusers class defaults).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TransformerConfig {
    /// Latent frames, rows and columns per token.
    pub patch_size: [i64; 3],
    /// Attention heads per block.
    pub num_attention_heads: i64,
    /// Width of one head.
    pub attention_head_dim: i64,
    /// Channels of the latents in (more than the VAE's for image-to-video, which adds the image's).
    pub in_channels: i64,
    /// Channels of the prediction out; `in_channels` when absent.
    pub out_channels: Option<i64>,
    /// Width of the text encoder's embeddings.
    pub text_dim: i64,
    /// Width of the sinusoidal timestep embedding.
    pub freq_dim: i64,
    /// Width of the feed-forward's inner layer.
    pub ffn_dim: i64,
    /// Transformer blocks.
    pub num_layers: i64,
    /// Whether cross-attention's input is normalised first.
    pub cross_attn_norm: bool,
    /// How q and k are normalised; only `rms_norm_across_heads` runs.
    pub qk_norm: Option<String>,
    /// The norms' epsilon.
    pub eps: f64,
    /// Width of the CLIP image embedding (image-to-video models); `None` without one.
    pub image_dim: Option<i64>,
    /// Width of the image keys and values in cross-attention: with `image_dim`, and equal to the
    /// inner width.
    pub added_kv_proj_dim: Option<i64>,
    /// Positions the rotary tables cover per axis.
    pub rope_max_seq_len: i64,
    /// First-and-last-frame models: the two images' tokens, which get a learned position embedding.
    pub pos_embed_seq_len: Option<i64>,
    /// An FP8 checkpoint's export settings (NVIDIA ModelOpt): the method and the modules left
    /// unquantized.
    pub quantization_config: Option<fastvideo_layers::quant_config::QuantizationConfig>,
}

/// `WanTransformer3DModel.__init__`'s defaults (Wan2.1-T2V-14B) in
/// `src/diffusers/models/transformers/transformer_wan.py` of diffusers v0.42.1, the pinned tag.
impl Default for TransformerConfig {
    fn default() -> Self {
        Self {
            patch_size: [1, 2, 2],
            num_attention_heads: 40,
            attention_head_dim: 128,
            in_channels: 16,
            out_channels: Some(16),
            text_dim: 4096,
            freq_dim: 256,
            ffn_dim: 13824,
            num_layers: 40,
            cross_attn_norm: true,
            qk_norm: Some("rms_norm_across_heads".into()),
            eps: 1e-6,
            image_dim: None,
            added_kv_proj_dim: None,
            rope_max_seq_len: 1024,
            pos_embed_seq_len: None,
            quantization_config: None,
        }
    }
}

impl TransformerConfig {
    /// Reads `transformer/config.json`; unknown keys and shapes this crate cannot run are refused,
    /// naming them.
    pub fn load(path: &Path) -> Result<Self> {
        let cfg: Self = read_config(path)?;
        if let Some(q) = &cfg.quantization_config {
            q.check(path)?;
        }
        if cfg.qk_norm.as_deref() != Some("rms_norm_across_heads") {
            return Err(unsupported(path, "qk_norm", format!("{:?}", cfg.qk_norm), "only \"rms_norm_across_heads\""));
        }
        // Image-conditioned models embed CLIP states to the model width and project them with
        // `add_k_proj`/`add_v_proj` from that width: both keys are set together, or neither.
        match (cfg.image_dim, cfg.added_kv_proj_dim) {
            (None, None) | (Some(_), Some(_)) => {}
            (Some(_), None) => {
                return Err(unsupported(path, "added_kv_proj_dim", "null", "an image_dim model needs it"))
            }
            (None, Some(v)) => {
                return Err(unsupported(path, "added_kv_proj_dim", v, "only with image_dim (image-to-video)"))
            }
        }
        if let Some(v) = cfg.added_kv_proj_dim.filter(|&v| v != cfg.inner_dim()) {
            return Err(unsupported(
                path,
                "added_kv_proj_dim",
                v,
                &format!("the image embedder's width, num_attention_heads x attention_head_dim = {}", cfg.inner_dim()),
            ));
        }
        if let Some(v) = cfg.pos_embed_seq_len {
            if cfg.image_dim.is_none() || v % 2 != 0 {
                return Err(unsupported(
                    path,
                    "pos_embed_seq_len",
                    v,
                    "an even token count (two images' tokens) on an image_dim model (FLF2V)",
                ));
            }
        }
        ensure!(
            cfg.attention_head_dim % 2 == 0 && cfg.freq_dim % 2 == 0,
            "{}: attention_head_dim and freq_dim must be even",
            path.display()
        );
        Ok(cfg)
    }
    /// The published shapes by name, for benchmarks with random weights: `wan-1.3b`
    /// (Wan2.1-T2V-1.3B), `wan-14b` (Wan2.1-T2V-14B, the class defaults), `wan-i2v-14b` and
    /// `wan-flf2v-14b`.
    ///
    /// What each mirrors: the class defaults are `WanTransformer3DModel.__init__`'s in diffusers
    /// v0.42.1 (the tag this project pins, tests/fixtures/requirements.txt),
    /// `src/diffusers/models/transformers/transformer_wan.py`; the others are the differences
    /// from them in `transformer/config.json` of the Hub's diffusers folders
    /// `Wan-AI/Wan2.1-T2V-1.3B-Diffusers`, `Wan-AI/Wan2.1-I2V-14B-480P-Diffusers` and
    /// `Wan-AI/Wan2.1-FLF2V-14B-720P-diffusers`.
    pub fn preset(name: &str) -> Result<Self> {
        match name {
            "wan-14b" => Ok(Self::default()),
            "wan-1.3b" => Ok(Self { num_attention_heads: 12, ffn_dim: 8960, num_layers: 30, ..Self::default() }),
            // Wan2.1-I2V-14B-480P/720P: 16 noise + 4 mask + 16 first-frame channels, ViT-H/14 states.
            "wan-i2v-14b" => {
                Ok(Self { in_channels: 36, image_dim: Some(1280), added_kv_proj_dim: Some(5120), ..Self::default() })
            }
            // Wan2.1-FLF2V-14B-720P: the same, with positions over the two images' 2 x 257 tokens.
            "wan-flf2v-14b" => Ok(Self { pos_embed_seq_len: Some(514), ..Self::preset("wan-i2v-14b")? }),
            other => anyhow::bail!(
                "unknown transformer shape `{other}` (wan-1.3b, wan-14b, wan-i2v-14b, wan-flf2v-14b, or a config.json path)"
            ),
        }
    }

    /// Width of the attention: heads × head width.
    pub fn inner_dim(&self) -> i64 {
        self.num_attention_heads * self.attention_head_dim
    }
    /// Channels of the prediction out.
    pub fn out_channels(&self) -> i64 {
        self.out_channels.unwrap_or(self.in_channels)
    }
}
