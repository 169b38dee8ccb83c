//! `transformer/config.json` of a Cosmos3 folder (diffusers `Cosmos3OmniTransformer`), read
//! strictly: a key we do not implement is an error naming it. Released folders carry keys of
//! older writers; those that cannot change the computation are accepted, those that name a
//! field we have under another name are mapped, the rest refused.

use std::path::Path;

use anyhow::Result;
use fastvideo_layers::config::{read_config_with, unsupported};
use serde::Deserialize;

/// The feed-forward and norm family of the layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// Nano/Super: SwiGLU MLP, RMSNorm (Qwen3-VL backbone).
    Silu,
    /// Edge: `down(relu(up(x))²)`, Nemotron RMSNorm (float32 statistics and weight).
    Relu2,
}

/// The transformer's architecture; fields are the config keys.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct Cosmos3Config {
    #[serde(default)]
    pub attention_bias: bool,
    #[serde(default)]
    pub attention_dropout: f64,
    pub head_dim: i64,
    pub hidden_size: i64,
    pub intermediate_size: i64,
    #[serde(default = "defaults::base_fps")]
    pub base_fps: f64,
    #[serde(default = "defaults::yes")]
    pub enable_fps_modulation: bool,
    #[serde(default = "defaults::latent_channel")]
    pub latent_channel: i64,
    #[serde(default = "defaults::yes")]
    pub unified_3d_mrope_reset_spatial_ids: bool,
    #[serde(default = "defaults::margin")]
    pub unified_3d_mrope_temporal_modality_margin: i64,
    #[serde(default = "defaults::patch")]
    pub latent_patch_size: i64,
    pub num_attention_heads: i64,
    pub num_hidden_layers: i64,
    pub num_key_value_heads: i64,
    pub patch_latent_dim: i64,
    #[serde(default = "defaults::eps")]
    pub rms_norm_eps: f64,
    #[serde(default)]
    pub rope_scaling: Option<RopeScaling>,
    #[serde(default = "defaults::theta")]
    pub rope_theta: f64,
    #[serde(default)]
    pub action_dim: Option<i64>,
    #[serde(default)]
    pub action_gen: bool,
    #[serde(default = "defaults::domains")]
    pub num_embodiment_domains: i64,
    #[serde(default)]
    pub sound_dim: Option<i64>,
    #[serde(default)]
    pub sound_gen: bool,
    #[serde(default = "defaults::sound_fps")]
    pub sound_latent_fps: f64,
    #[serde(default = "defaults::timestep_scale")]
    pub timestep_scale: f64,
    #[serde(default = "defaults::vocab")]
    pub vocab_size: i64,
    #[serde(default = "defaults::silu")]
    pub hidden_act: String,
    #[serde(default = "defaults::yes")]
    pub qk_norm_for_text: bool,
    #[serde(default)]
    pub use_und_k_norm_for_gen: bool,
    #[serde(default)]
    pub rope_axes_dim: Option<[i64; 3]>,
    /// Older writers' name for `qk_norm_for_text`.
    #[serde(default)]
    qk_norm: Option<bool>,
    /// Older writers' name for `action_dim`.
    #[serde(default)]
    max_action_dim: Option<i64>,
    /// Older writers: the official framework's MoE generation MLPs; only `false` is this model.
    #[serde(default)]
    use_moe: Option<bool>,
}

/// `rope_scaling` as Qwen3-VL configs write it: only the mRoPE sections are read.
#[derive(Clone, Debug, Deserialize)]
#[allow(missing_docs)]
pub struct RopeScaling {
    #[serde(default)]
    pub mrope_section: Option<[i64; 3]>,
    #[serde(default)]
    pub mrope_interleaved: Option<bool>,
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    #[serde(default)]
    pub rope_type: Option<String>,
}

mod defaults {
    pub fn yes() -> bool {
        true
    }
    pub fn base_fps() -> f64 {
        24.0
    }
    pub fn latent_channel() -> i64 {
        48
    }
    pub fn margin() -> i64 {
        15000
    }
    pub fn patch() -> i64 {
        2
    }
    pub fn eps() -> f64 {
        1e-6
    }
    pub fn theta() -> f64 {
        5_000_000.0
    }
    pub fn domains() -> i64 {
        32
    }
    pub fn sound_fps() -> f64 {
        25.0
    }
    pub fn timestep_scale() -> f64 {
        0.001
    }
    pub fn vocab() -> i64 {
        151_936
    }
    pub fn silu() -> String {
        "silu".into()
    }
}

/// Keys older released folders carry that the reference's inference never reads.
const INERT: &[&str] =
    &["joint_attn_implementation", "attn_implementation", "initializer_range", "tie_word_embeddings"];

impl Cosmos3Config {
    /// Reads and checks `path`.
    pub fn load(path: &Path) -> Result<Self> {
        let mut c: Self = read_config_with(path, &[INERT])?;
        if let Some(v) = c.qk_norm.take() {
            c.qk_norm_for_text = v;
        }
        if let Some(v) = c.max_action_dim.take() {
            c.action_dim.get_or_insert(v);
        }
        if c.use_moe == Some(true) {
            return Err(unsupported(path, "use_moe", true, "dense generation MLPs only, as diffusers"));
        }
        c.activation().map_err(|_| unsupported(path, "hidden_act", &c.hidden_act, "silu or relu2"))?;
        let p = c.latent_patch_size;
        if c.patch_latent_dim != p * p * c.latent_channel {
            return Err(unsupported(
                path,
                "patch_latent_dim",
                c.patch_latent_dim,
                "latent_patch_size² · latent_channel",
            ));
        }
        if c.num_attention_heads % c.num_key_value_heads != 0 {
            return Err(unsupported(path, "num_key_value_heads", c.num_key_value_heads, "a divisor of the heads"));
        }
        if c.sound_gen && c.sound_dim.is_none() {
            return Err(unsupported(path, "sound_dim", "null", "a width when sound_gen is true"));
        }
        if c.action_gen && c.action_dim.is_none() {
            return Err(unsupported(path, "action_dim", "null", "a width when action_gen is true"));
        }
        let sections = c.sections();
        if sections.iter().any(|s| *s < 0) || 3 * sections[1].max(sections[2]) > c.head_dim / 2 + 2 {
            return Err(unsupported(path, "rope_axes_dim", format!("{sections:?}"), "sections within head_dim / 2"));
        }
        Ok(c)
    }

    /// The layers' activation and norm family.
    pub fn activation(&self) -> Result<Activation> {
        match self.hidden_act.as_str() {
            "silu" => Ok(Activation::Silu),
            "relu2" => Ok(Activation::Relu2),
            other => anyhow::bail!("hidden_act `{other}`"),
        }
    }

    /// mRoPE sections `(T, H, W)`: `rope_axes_dim`, else `rope_scaling.mrope_section`, else
    /// `[24, 20, 20]` (diffusers' default).
    pub fn sections(&self) -> [i64; 3] {
        self.rope_axes_dim.or_else(|| self.rope_scaling.as_ref().and_then(|r| r.mrope_section)).unwrap_or([24, 20, 20])
    }

    /// Sound latent width, when the model makes sound.
    pub fn sound(&self) -> Option<i64> {
        self.sound_gen.then_some(self.sound_dim).flatten()
    }

    /// Action width, when the model makes actions.
    pub fn action(&self) -> Option<i64> {
        self.action_gen.then_some(self.action_dim).flatten()
    }
}
