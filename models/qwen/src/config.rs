//! `config.json` of a transformers Qwen3 or Qwen2 causal LM, as far as inference reads it.

use std::path::Path;

use anyhow::{bail, ensure, Context, Result};
use serde::Deserialize;

/// The two families this crate runs. They differ in three places: Qwen3 normalises q and k per
/// head (RMSNorm over the head dim) and states its head dim; Qwen2 adds biases to q, k and v.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// Qwen3: per-head q/k RMSNorm, `head_dim` stated.
    Qwen3,
    /// Qwen2 and Qwen2.5: biases on q, k and v.
    Qwen2,
}

/// The model's shape and constants, from `config.json` (names as transformers spells them).
#[derive(Clone, Debug)]
pub struct QwenConfig {
    /// From `model_type`: which of the two layer variants it uses.
    pub family: Family,
    /// Rows of the embedding and of the LM head.
    pub vocab_size: i64,
    /// Width of the residual stream.
    pub hidden_size: i64,
    /// Width of the SwiGLU's inner layer.
    pub intermediate_size: i64,
    /// Decoder layers.
    pub num_hidden_layers: i64,
    /// Query heads.
    pub num_attention_heads: i64,
    /// Key/value heads, each shared by `num_attention_heads / num_key_value_heads` query heads.
    pub num_key_value_heads: i64,
    /// Width of one head (Qwen3 states it; Qwen2's is `hidden_size / num_attention_heads`).
    pub head_dim: i64,
    /// The RMSNorms' epsilon.
    pub rms_norm_eps: f64,
    /// The rotary embedding's base (10000 when absent).
    pub rope_theta: f64,
    /// Longest sequence, prompt and output together (32768 when absent).
    pub max_position_embeddings: i64,
    /// Whether the LM head is the token embedding itself.
    pub tie_word_embeddings: bool,
    /// Biases on q, k and v (Qwen2 always; Qwen3 when `attention_bias`).
    pub qkv_bias: bool,
    /// Tokens that end a completion, from `eos_token_id` (one or a list).
    pub eos_token_ids: Vec<i64>,
}

#[derive(Deserialize)]
struct Raw {
    model_type: String,
    vocab_size: i64,
    hidden_size: i64,
    intermediate_size: i64,
    num_hidden_layers: i64,
    num_attention_heads: i64,
    num_key_value_heads: Option<i64>,
    head_dim: Option<i64>,
    #[serde(default = "default_eps")]
    rms_norm_eps: f64,
    /// transformers ≤ 4: top level; transformers 5: under `rope_parameters`.
    rope_theta: Option<f64>,
    rope_parameters: Option<RopeParameters>,
    rope_scaling: Option<serde_json::Value>,
    #[serde(default = "default_positions")]
    max_position_embeddings: i64,
    #[serde(default)]
    tie_word_embeddings: bool,
    #[serde(default)]
    attention_bias: bool,
    #[serde(default = "default_act")]
    hidden_act: String,
    #[serde(default)]
    use_sliding_window: bool,
    eos_token_id: Option<serde_json::Value>,
}

/// A Qwen2.5-VL `config.json` as its text model's: transformers 5 nests the text keys in
/// `text_config`, older writers keep them at the top level (then the top level is the text
/// config). Other configs pass unchanged.
fn vl_text_config(mut value: serde_json::Value) -> serde_json::Value {
    if value.get("model_type").and_then(|m| m.as_str()) != Some("qwen2_5_vl") {
        return value;
    }
    let mut text = match value.get_mut("text_config").map(serde_json::Value::take) {
        Some(serde_json::Value::Object(t)) => t,
        _ => value.as_object().cloned().unwrap_or_default(),
    };
    // Top-level keys the text config leaves out (older writers kept them beside it).
    if let Some(top) = value.as_object() {
        for (k, v) in top {
            if k != "vision_config" && k != "text_config" {
                text.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
    }
    text.insert("model_type".into(), "qwen2_5_vl_text".into());
    serde_json::Value::Object(text)
}

#[derive(Deserialize)]
struct RopeParameters {
    rope_theta: Option<f64>,
    rope_type: Option<String>,
}

// Defaults of keys a folder may leave out: `Qwen3Config.__init__`'s in
// `src/transformers/models/qwen3/configuration_qwen3.py` of transformers v5.24.0, the version
// this project pins (tests/fixtures/requirements.txt); `Qwen2Config`'s agree.
fn default_eps() -> f64 {
    1e-6
}
fn default_positions() -> i64 {
    32768
}
fn default_act() -> String {
    "silu".into()
}

impl QwenConfig {
    /// Reads and checks a `config.json`; errors name the file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("{}", path.display()))
    }

    /// Parses and checks `config.json`'s text: features this crate does not run (sliding windows,
    /// rope scaling, activations other than SiLU) are refused, not ignored.
    pub fn parse(text: &str) -> Result<Self> {
        let value: serde_json::Value = serde_json::from_str(text).context("not valid JSON")?;
        let value = vl_text_config(value);
        let vl = value.get("model_type").and_then(|m| m.as_str()) == Some("qwen2_5_vl_text");
        let mut raw: Raw = serde_json::from_value(value).context("not a Qwen config.json")?;
        let family = match raw.model_type.as_str() {
            "qwen3" => Family::Qwen3,
            "qwen2" | "qwen2_5_vl_text" => Family::Qwen2,
            other => bail!("model_type `{other}`: this loader runs qwen3, qwen2 and Qwen2.5-VL's text model"),
        };
        if vl {
            // Multimodal rope over text alone: every axis holds the same position, which is the
            // ordinary rotary embedding. Pictures inside the prompt need the vision path.
            raw.rope_scaling = None;
            if let Some(r) = raw.rope_parameters.as_mut() {
                r.rope_type = None;
            }
        }
        ensure!(raw.hidden_act == "silu", "hidden_act `{}`: only silu is supported", raw.hidden_act);
        ensure!(!raw.use_sliding_window, "use_sliding_window: sliding-window attention is not supported");
        let rope_type = raw.rope_parameters.as_ref().and_then(|r| r.rope_type.clone());
        let scaled = raw.rope_scaling.as_ref().is_some_and(|v| !v.is_null());
        ensure!(
            rope_type.as_deref().unwrap_or("default") == "default" && !scaled,
            "rope scaling ({}) is not supported",
            rope_type.unwrap_or_else(|| "rope_scaling".into())
        );
        let rope_theta = raw.rope_parameters.and_then(|r| r.rope_theta).or(raw.rope_theta).unwrap_or(10000.0);
        let heads = raw.num_attention_heads;
        let kv_heads = raw.num_key_value_heads.unwrap_or(heads);
        ensure!(
            heads > 0 && kv_heads > 0 && heads % kv_heads == 0,
            "num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}"
        );
        let head_dim = match family {
            Family::Qwen3 => raw.head_dim.unwrap_or(raw.hidden_size / heads),
            Family::Qwen2 => raw.hidden_size / heads,
        };
        ensure!(head_dim % 2 == 0, "head_dim {head_dim} must be even (rotary pairs)");
        let eos_token_ids = match raw.eos_token_id {
            Some(serde_json::Value::Number(n)) => n.as_i64().into_iter().collect(),
            Some(serde_json::Value::Array(a)) => a.iter().filter_map(|v| v.as_i64()).collect(),
            _ => Vec::new(),
        };
        Ok(Self {
            family,
            vocab_size: raw.vocab_size,
            hidden_size: raw.hidden_size,
            intermediate_size: raw.intermediate_size,
            num_hidden_layers: raw.num_hidden_layers,
            num_attention_heads: heads,
            num_key_value_heads: kv_heads,
            head_dim,
            rms_norm_eps: raw.rms_norm_eps,
            rope_theta,
            max_position_embeddings: raw.max_position_embeddings,
            tie_word_embeddings: raw.tie_word_embeddings,
            qkv_bias: family == Family::Qwen2 || raw.attention_bias,
            eos_token_ids,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rope_theta_is_read_from_either_place_and_scaling_is_refused() {
        let base = r#"{"model_type": "qwen3", "vocab_size": 8, "hidden_size": 8, "intermediate_size": 8,
            "num_hidden_layers": 1, "num_attention_heads": 2"#;
        let v5 = QwenConfig::parse(&format!(
            r#"{base}, "rope_parameters": {{"rope_theta": 5.0, "rope_type": "default"}}}}"#
        ))
        .unwrap();
        let v4 = QwenConfig::parse(&format!(r#"{base}, "rope_theta": 7.0}}"#)).unwrap();
        assert_eq!((v5.rope_theta, v4.rope_theta, v4.head_dim, v4.num_key_value_heads), (5.0, 7.0, 4, 2));
        let yarn =
            QwenConfig::parse(&format!(r#"{base}, "rope_parameters": {{"rope_theta": 5.0, "rope_type": "yarn"}}}}"#));
        assert!(format!("{:#}", yarn.unwrap_err()).contains("yarn"));
        let other = r#"{"model_type": "llama", "vocab_size": 8, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2}"#;
        assert!(format!("{:#}", QwenConfig::parse(other).unwrap_err()).contains("llama"));
    }
}
