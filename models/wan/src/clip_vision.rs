//! `CLIPVisionModel` (transformers `models/clip/modeling_clip.py`): the image encoder of Wan 2.1's
//! image-to-video models. A pre-norm ViT: patch convolution plus a class token and learned
//! positions, `pre_layrnorm`, then encoder layers of self-attention and an MLP. Wan conditions on
//! the penultimate layer's hidden states (`hidden_states[-2]`), so the last layer and the pooled
//! head (`post_layernorm`, the projection) never run here.

use std::path::Path;

use anyhow::{ensure, Result};
use fastvideo_layers::config::{read_config_with, unsupported, TRANSFORMERS_BOOKKEEPING};
use fastvideo_layers::heads::{merge_heads, split_heads};
use fastvideo_layers::Linear;
use serde::Deserialize;
use tch::{Kind, Tensor};

use crate::weights::Weights;

/// `image_encoder/config.json` (a `CLIPVisionConfig`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClipVisionConfig {
    /// Width of the hidden states.
    pub hidden_size: i64,
    /// Width of the MLP's inner layer.
    pub intermediate_size: i64,
    /// Encoder layers (Wan reads the penultimate one's output).
    pub num_hidden_layers: i64,
    /// Attention heads per layer.
    pub num_attention_heads: i64,
    /// Channels of the image (3 when absent).
    #[serde(default = "default_channels")]
    pub num_channels: i64,
    /// Side of the square input image in pixels.
    pub image_size: i64,
    /// Side of one patch (one token) in pixels.
    pub patch_size: i64,
    /// transformers' default is `quick_gelu`; Wan's encoder (ViT-H/14) uses `gelu`.
    #[serde(default = "default_act")]
    pub hidden_act: String,
    /// The LayerNorms' epsilon.
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    // Accepted, no effect on the hidden states Wan reads (the projection head, init, dropout).
    /// The projection head's width: accepted, unused (Wan reads hidden states).
    #[serde(default)]
    pub projection_dim: Option<i64>,
    /// Training only: accepted, no effect on inference.
    #[serde(default)]
    pub attention_dropout: f64,
    /// Training only: accepted, no effect on inference.
    #[serde(default)]
    pub dropout: f64,
    /// Initialisation only: accepted, no effect on loaded weights.
    #[serde(default)]
    pub initializer_range: f64,
    /// Initialisation only: accepted, no effect on loaded weights.
    #[serde(default)]
    pub initializer_factor: f64,
}

fn default_channels() -> i64 {
    3
}
fn default_act() -> String {
    "quick_gelu".into()
}
fn default_eps() -> f64 {
    1e-5
}

impl ClipVisionConfig {
    /// Reads `image_encoder/config.json`; unknown keys and activations other than GELU are refused.
    pub fn load(path: &Path) -> Result<Self> {
        let cfg: Self = read_config_with(path, &[TRANSFORMERS_BOOKKEEPING])?;
        if !matches!(cfg.hidden_act.as_str(), "gelu" | "quick_gelu") {
            return Err(unsupported(path, "hidden_act", &cfg.hidden_act, "\"gelu\" or \"quick_gelu\""));
        }
        ensure!(
            cfg.hidden_size % cfg.num_attention_heads == 0,
            "{}: hidden_size {} is not a multiple of num_attention_heads {}",
            path.display(),
            cfg.hidden_size,
            cfg.num_attention_heads
        );
        ensure!(
            cfg.image_size % cfg.patch_size == 0,
            "{}: image_size {} is not a multiple of patch_size {}",
            path.display(),
            cfg.image_size,
            cfg.patch_size
        );
        ensure!(cfg.num_hidden_layers >= 2, "{}: the penultimate layer needs num_hidden_layers >= 2", path.display());
        Ok(cfg)
    }

    /// Tokens per image: one per patch and the class token (257 for ViT-H/14 at 224).
    pub fn tokens(&self) -> i64 {
        (self.image_size / self.patch_size).pow(2) + 1
    }
}

struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
    eps: f64,
}

impl LayerNorm {
    fn new(w: &Weights, dim: i64, eps: f64) -> Result<Self> {
        Ok(Self { weight: w.get("weight", &[dim])?, bias: w.get("bias", &[dim])?, eps })
    }
    fn forward(&self, x: &Tensor) -> Tensor {
        let dim = self.weight.size()[0];
        x.layer_norm([dim], Some(&self.weight), Some(&self.bias), self.eps, false)
    }
}

struct EncoderLayer {
    norm1: LayerNorm,
    qkv: Linear,
    out: Linear,
    norm2: LayerNorm,
    fc1: Linear,
    fc2: Linear,
}

impl EncoderLayer {
    fn new(w: &Weights, cfg: &ClipVisionConfig) -> Result<Self> {
        let (d, eps) = (cfg.hidden_size, cfg.layer_norm_eps);
        let a = w.pp("self_attn");
        let qkv = ["q_proj", "k_proj", "v_proj"].map(|p| Linear::new(&a.pp(p), d, d, true));
        let [q, k, v] = qkv;
        Ok(Self {
            norm1: LayerNorm::new(&w.pp("layer_norm1"), d, eps)?,
            qkv: Linear::concat(vec![q?, k?, v?]),
            out: Linear::new(&a.pp("out_proj"), d, d, true)?,
            norm2: LayerNorm::new(&w.pp("layer_norm2"), d, eps)?,
            fc1: Linear::new(&w.pp("mlp.fc1"), d, cfg.intermediate_size, true)?,
            fc2: Linear::new(&w.pp("mlp.fc2"), cfg.intermediate_size, d, true)?,
        })
    }

    fn forward(&self, x: &Tensor, heads: i64, quick_gelu: bool) -> Tensor {
        let qkv = self.qkv.forward(&self.norm1.forward(x)).chunk(3, -1);
        let (q, k, v) = (split_heads(&qkv[0], heads), split_heads(&qkv[1], heads), split_heads(&qkv[2], heads));
        // SDPA's default scale is head_dim^-0.5, CLIP's.
        let o = Tensor::scaled_dot_product_attention(&q, &k, &v, None::<&Tensor>, 0.0, false, None, false);
        let x = x + self.out.forward(&merge_heads(&o));
        let h = self.fc1.forward(&self.norm2.forward(&x));
        let h = if quick_gelu { &h * (&h * 1.702).sigmoid() } else { h.gelu("none") };
        x + self.fc2.forward(&h)
    }
}

/// The encoder up to its penultimate layer, which is all Wan reads.
pub struct ClipVisionEncoder {
    /// The encoder's config.
    pub cfg: ClipVisionConfig,
    patch: Tensor,
    class: Tensor,
    positions: Tensor,
    pre_norm: LayerNorm,
    layers: Vec<EncoderLayer>,
}

// SAFETY: tensors are written once in `new` and only read afterwards (see WanTransformer3DModel).
unsafe impl Sync for ClipVisionEncoder {}
unsafe impl Send for ClipVisionEncoder {}

impl ClipVisionEncoder {
    /// Reads `vision_model.*` (how `CLIPVisionModel`/`...WithProjection` checkpoints are saved)
    /// or the same keys without the prefix (transformers 5's flat layout).
    pub fn new(cfg: ClipVisionConfig, w: &Weights) -> Result<Self> {
        let w = if w.contains("vision_model.embeddings.class_embedding") { w.pp("vision_model") } else { w.clone() };
        let (d, p) = (cfg.hidden_size, cfg.patch_size);
        let e = w.pp("embeddings");
        let layers = (0..cfg.num_hidden_layers - 1)
            .map(|i| EncoderLayer::new(&w.pp("encoder.layers").pp(i), &cfg))
            .collect::<Result<_>>()?;
        Ok(Self {
            patch: e.get("patch_embedding.weight", &[d, cfg.num_channels, p, p])?,
            class: e.get("class_embedding", &[d])?,
            positions: e.get("position_embedding.weight", &[cfg.tokens(), d])?,
            pre_norm: LayerNorm::new(&w.pp("pre_layrnorm"), d, cfg.layer_norm_eps)?,
            layers,
            cfg,
        })
    }

    /// `pixel_values [N, 3, S, S]` (already processed: see [`fastvideo_layers::image_processor`]) → the
    /// penultimate layer's hidden states `[N, tokens, hidden]`, transformers'
    /// `hidden_states[-2]`, in the weights' dtype.
    pub fn penultimate(&self, pixel_values: &Tensor) -> Result<Tensor> {
        let s = pixel_values.size();
        let (c, size) = (self.cfg.num_channels, self.cfg.image_size);
        ensure!(
            s.len() == 4 && s[1] == c && s[2] == size && s[3] == size,
            "image encoder: pixel_values {s:?} must be [N, {c}, {size}, {size}]"
        );
        let n = s[0];
        let p = self.cfg.patch_size;
        let x = pixel_values.to_kind(self.patch.kind());
        let patches = x.conv2d(&self.patch, None::<&Tensor>, [p, p], [0, 0], [1, 1], 1).flatten(2, -1).transpose(1, 2);
        let class = self.class.view([1, 1, -1]).expand([n, 1, -1], false);
        let mut x = self.pre_norm.forward(&(Tensor::cat(&[class, patches], 1) + &self.positions));
        let (heads, quick) = (self.cfg.num_attention_heads, self.cfg.hidden_act == "quick_gelu");
        for layer in &self.layers {
            x = layer.forward(&x, heads, quick);
        }
        Ok(x)
    }

    /// The dtype the encoder computes in.
    pub fn kind(&self) -> Kind {
        self.patch.kind()
    }
}
