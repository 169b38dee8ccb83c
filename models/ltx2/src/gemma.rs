//! Gemma 3's language model as LTX-2's text encoder (`text_encoder/`, a
//! `Gemma3ForConditionalGeneration` of which only the text half runs): scaled token embeddings,
//! layers of grouped-query attention with per-head norms of q and k, sliding-window layers
//! between global ones (each kind with its own rotary base), `(1 + w)` RMSNorms around both
//! halves, a tanh-GELU gated MLP. The pipeline keeps every layer's hidden state, the last one
//! after the final norm, so that is what [`GemmaEncoder::forward`] returns.
//!
//! Prompts are padded on the left. A padded query sees no key at all; torch's SDPA gives such a
//! row zeros, and so does this encoder on every device (the row attends to itself and is then
//! zeroed), so no NaN ever reaches the connectors.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{bail, ensure, Context, Result};
use fastvideo_layers::Linear;
use fastvideo_torch::weights::Weights;
use serde::Deserialize;
use tch::{Device, Kind, Tensor};

/// `text_config` of the folder's `config.json` (or the whole file for a text-only model), with
/// transformers' `Gemma3TextConfig` defaults for what a saved config leaves out.
#[derive(Clone, Debug, Deserialize)]
#[serde(default)]
pub struct GemmaConfig {
    /// Vocabulary size.
    pub vocab_size: i64,
    /// Model width.
    pub hidden_size: i64,
    /// MLP width.
    pub intermediate_size: i64,
    /// Layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: i64,
    /// Key/value heads.
    pub num_key_value_heads: i64,
    /// Width of a head.
    pub head_dim: i64,
    /// Only `gelu_pytorch_tanh`.
    pub hidden_activation: String,
    /// Norm epsilon.
    pub rms_norm_eps: f64,
    /// Biases on the attention projections.
    pub attention_bias: bool,
    /// Attention scores are scaled by its inverse square root.
    pub query_pre_attn_scalar: f64,
    /// A sliding layer's query sees the keys less than this many positions back.
    pub sliding_window: i64,
    /// `sliding_attention` or `full_attention` per layer; absent, every `sliding_window_pattern`-th
    /// layer is global.
    pub layer_types: Option<Vec<String>>,
    /// Older configs' way of giving the layer kinds.
    pub sliding_window_pattern: usize,
    /// transformers 5: the rotary settings per layer kind.
    pub rope_parameters: Option<HashMap<String, RopeParameters>>,
    /// Older configs: the global layers' base and scaling, the local layers' base.
    pub rope_theta: f64,
    /// See `rope_theta`.
    pub rope_scaling: Option<RopeParameters>,
    /// See `rope_theta`.
    pub rope_local_base_freq: f64,
    /// Must be absent: Gemma 3 does not soft-cap attention logits.
    pub attn_logit_softcapping: Option<f64>,
    /// Must be false for the text encoder.
    pub use_bidirectional_attention: Option<bool>,
}

impl Default for GemmaConfig {
    fn default() -> Self {
        Self {
            vocab_size: 262_208,
            hidden_size: 2304,
            intermediate_size: 9216,
            num_hidden_layers: 26,
            num_attention_heads: 8,
            num_key_value_heads: 4,
            head_dim: 256,
            hidden_activation: "gelu_pytorch_tanh".into(),
            rms_norm_eps: 1e-6,
            attention_bias: false,
            query_pre_attn_scalar: 256.0,
            sliding_window: 4096,
            layer_types: None,
            sliding_window_pattern: 6,
            rope_parameters: None,
            rope_theta: 1_000_000.0,
            rope_scaling: None,
            rope_local_base_freq: 10_000.0,
            attn_logit_softcapping: None,
            use_bidirectional_attention: None,
        }
    }
}

/// One layer kind's rotary settings (`default` or `linear`).
#[derive(Clone, Debug, Deserialize)]
pub struct RopeParameters {
    /// `default` or `linear`.
    #[serde(default = "default_rope", alias = "type")]
    pub rope_type: String,
    /// Base; absent, the layer kind's default.
    pub rope_theta: Option<f64>,
    /// `linear`: positions divided by it.
    pub factor: Option<f64>,
}

fn default_rope() -> String {
    "default".into()
}

impl GemmaConfig {
    /// Reads `config.json`: its `text_config` when it is a multimodal config.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let mut value: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("{}: not valid JSON", path.display()))?;
        if let Some(t) = value.get_mut("text_config") {
            value = t.take();
        }
        let cfg: Self = serde_json::from_value(value).with_context(|| format!("{}: text config", path.display()))?;
        cfg.validate().with_context(|| format!("{}", path.display()))?;
        Ok(cfg)
    }

    fn validate(&self) -> Result<()> {
        ensure!(
            self.hidden_activation == "gelu_pytorch_tanh",
            "hidden_activation `{}` is not supported (gelu_pytorch_tanh)",
            self.hidden_activation
        );
        ensure!(self.attn_logit_softcapping.is_none(), "attn_logit_softcapping is not supported (absent)");
        ensure!(self.use_bidirectional_attention != Some(true), "use_bidirectional_attention is not supported (false)");
        ensure!(
            self.num_attention_heads % self.num_key_value_heads == 0,
            "num_attention_heads must be a multiple of num_key_value_heads"
        );
        for kind in self.layer_kinds() {
            self.rope(kind)?;
        }
        Ok(())
    }

    /// Whether each layer is a sliding-window one.
    pub fn layer_kinds(&self) -> Vec<bool> {
        match &self.layer_types {
            Some(t) => t.iter().map(|k| k == "sliding_attention").collect(),
            None => (0..self.num_hidden_layers).map(|i| (i + 1) % self.sliding_window_pattern.max(1) != 0).collect(),
        }
    }

    /// `(base, position divisor)` of the sliding layers (`true`) or the global ones.
    fn rope(&self, sliding: bool) -> Result<(f64, f64)> {
        let key = if sliding { "sliding_attention" } else { "full_attention" };
        let default_theta = if sliding { self.rope_local_base_freq } else { self.rope_theta };
        let params = match &self.rope_parameters {
            Some(p) => p.get(key).cloned(),
            None if !sliding => self.rope_scaling.clone(),
            None => None,
        };
        let Some(p) = params else { return Ok((default_theta, 1.0)) };
        let theta = p.rope_theta.unwrap_or(default_theta);
        match p.rope_type.as_str() {
            "default" => Ok((theta, 1.0)),
            "linear" => Ok((theta, p.factor.context("a linear rope without `factor`")?)),
            other => bail!("rope type `{other}` of the {key} layers is not supported (default, linear)"),
        }
    }
}

/// Gemma's RMSNorm: float32 statistics, scaled by `1 + w`, back in the input's type.
struct GemmaNorm {
    scale: Tensor,
    eps: f64,
}

impl GemmaNorm {
    fn new(w: &Weights, dim: i64, eps: f64) -> Result<Self> {
        Ok(Self { scale: w.get("weight", &[dim])?.to_kind(Kind::Float) + 1.0, eps })
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        let xf = x.to_kind(Kind::Float);
        let y = &xf * (xf.square().mean_dim(-1, true, Kind::Float) + self.eps).rsqrt();
        (y * &self.scale).to_kind(x.kind())
    }
}

struct Layer {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    q_norm: GemmaNorm,
    k_norm: GemmaNorm,
    gate: Linear,
    up: Linear,
    down: Linear,
    input_norm: GemmaNorm,
    post_attention_norm: GemmaNorm,
    pre_feedforward_norm: GemmaNorm,
    post_feedforward_norm: GemmaNorm,
    sliding: bool,
}

impl Layer {
    fn new(w: &Weights, c: &GemmaConfig, sliding: bool) -> Result<Self> {
        let (h, d, eps) = (c.hidden_size, c.head_dim, c.rms_norm_eps);
        let a = w.pp("self_attn");
        let m = w.pp("mlp");
        let bias = c.attention_bias;
        Ok(Self {
            q: Linear::new(&a.pp("q_proj"), h, c.num_attention_heads * d, bias)?,
            k: Linear::new(&a.pp("k_proj"), h, c.num_key_value_heads * d, bias)?,
            v: Linear::new(&a.pp("v_proj"), h, c.num_key_value_heads * d, bias)?,
            o: Linear::new(&a.pp("o_proj"), c.num_attention_heads * d, h, bias)?,
            q_norm: GemmaNorm::new(&a.pp("q_norm"), d, eps)?,
            k_norm: GemmaNorm::new(&a.pp("k_norm"), d, eps)?,
            gate: Linear::new(&m.pp("gate_proj"), h, c.intermediate_size, false)?,
            up: Linear::new(&m.pp("up_proj"), h, c.intermediate_size, false)?,
            down: Linear::new(&m.pp("down_proj"), c.intermediate_size, h, false)?,
            input_norm: GemmaNorm::new(&w.pp("input_layernorm"), h, eps)?,
            post_attention_norm: GemmaNorm::new(&w.pp("post_attention_layernorm"), h, eps)?,
            pre_feedforward_norm: GemmaNorm::new(&w.pp("pre_feedforward_layernorm"), h, eps)?,
            post_feedforward_norm: GemmaNorm::new(&w.pp("post_feedforward_layernorm"), h, eps)?,
            sliding,
        })
    }

    /// `x [B, L, C]` through the layer; `masks` as [`Masks`] builds them.
    fn forward(&self, x: &Tensor, c: &GemmaConfig, masks: &Masks) -> Tensor {
        let (b, l, _) = x.size3().expect("[B, L, C]");
        let d = c.head_dim;
        let (mask, (cos, sin)) = match self.sliding {
            true => (&masks.sliding, (&masks.local.0, &masks.local.1)),
            false => (&masks.full, (&masks.global.0, &masks.global.1)),
        };
        let n = self.input_norm.forward(x);
        let heads = |lin: &Linear, norm: &GemmaNorm| {
            let y = lin.forward(&n).view([b, l, -1, d]).transpose(1, 2);
            rotate(&norm.forward(&y), cos, sin)
        };
        let (q, k) = (heads(&self.q, &self.q_norm), heads(&self.k, &self.k_norm));
        let v = self.v.forward(&n).view([b, l, -1, d]).transpose(1, 2);
        let groups = c.num_attention_heads / c.num_key_value_heads;
        let (k, v) = match groups > 1 {
            true => (k.repeat_interleave_self_int(groups, 1, None), v.repeat_interleave_self_int(groups, 1, None)),
            false => (k, v),
        };
        let scale = c.query_pre_attn_scalar.powf(-0.5);
        let o = Tensor::scaled_dot_product_attention(&q, &k, &v, Some(mask), 0.0, false, Some(scale), false);
        // Padded queries: zeros, as SDPA gives a row that sees no key.
        let o = o * &masks.real_queries;
        let o = self.o.forward(&o.transpose(1, 2).reshape([b, l, -1]));
        let x = x + self.post_attention_norm.forward(&o);
        let n = self.pre_feedforward_norm.forward(&x);
        let mlp = self.down.forward(&(self.gate.forward(&n).gelu("tanh") * self.up.forward(&n)));
        &x + self.post_feedforward_norm.forward(&mlp)
    }
}

/// Rotates the halves of the last dimension (`rotate_half`) by the tables `[L, D]`.
fn rotate(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Tensor {
    let half = x.size()[3] / 2;
    let rotated = Tensor::cat(&[-x.narrow(3, half, half), x.narrow(3, 0, half)], 3);
    x * cos + rotated * sin
}

/// A forward's attention masks and rotary tables.
struct Masks {
    /// `[B, 1, L, L]`: causal, real keys (and each query's own position, so a padded row is not
    /// empty).
    full: Tensor,
    /// `full` within the sliding window.
    sliding: Tensor,
    /// `[B, 1, L, 1]`: 1 for a real query, 0 for padding.
    real_queries: Tensor,
    global: (Tensor, Tensor),
    local: (Tensor, Tensor),
}

impl Masks {
    fn new(mask: &Tensor, c: &GemmaConfig, kind: Kind) -> Result<Self> {
        let (_, l) = mask.size2()?;
        let device = mask.device();
        let pos = Tensor::arange(l, (Kind::Int64, device));
        let (qi, kj) = (pos.view([l, 1]), pos.view([1, l]));
        let real = mask.ne(0);
        let causal = kj.le_tensor(&qi).unsqueeze(0);
        let own = kj.eq_tensor(&qi).unsqueeze(0);
        let full = causal.logical_and(&real.unsqueeze(1)).logical_or(&own);
        let window = (&qi - &kj).lt(c.sliding_window).unsqueeze(0);
        let sliding = full.logical_and(&window);
        let table = |sliding: bool| -> Result<(Tensor, Tensor)> {
            let (theta, divisor) = c.rope(sliding)?;
            let d = c.head_dim;
            let inv: Vec<f32> =
                (0..d / 2).map(|i| (1.0 / theta.powf((2 * i) as f64 / d as f64) / divisor) as f32).collect();
            let inv = Tensor::from_slice(&inv).to_device(device);
            let freqs = pos.to_kind(Kind::Float).view([l, 1]) * inv.view([1, -1]);
            let emb = Tensor::cat(&[&freqs, &freqs], 1);
            Ok((emb.cos().to_kind(kind), emb.sin().to_kind(kind)))
        };
        Ok(Self {
            full: full.unsqueeze(1),
            sliding: sliding.unsqueeze(1),
            real_queries: real.to_kind(kind).view([-1, 1, l, 1]),
            global: table(false)?,
            local: table(true)?,
        })
    }
}

/// Where the language model's tensors sit in the file: transformers 5 and 4.5x multimodal,
/// older multimodal, text-only.
const PREFIXES: [&str; 3] = ["model.language_model", "language_model.model", "model"];

/// Gemma 3's language model, run as an encoder.
pub struct GemmaEncoder {
    /// Its config.
    pub cfg: GemmaConfig,
    embed: Tensor,
    embed_scale: f64,
    layers: Vec<Layer>,
    norm: GemmaNorm,
}

impl GemmaEncoder {
    /// Reads `dir` (`config.json`, `model*.safetensors`) onto `device` in `kind`.
    pub fn load(dir: &Path, device: Device, kind: Kind) -> Result<Self> {
        let cfg = GemmaConfig::from_file(&dir.join("config.json"))?;
        let w = Weights::from_dir(dir, "model", device, kind)?;
        let enc = Self::new(cfg, &w).with_context(|| format!("{}", dir.display()))?;
        // The vision tower, its projector and the tied head are not used by an encoder.
        let unused: Vec<String> = w
            .unused()
            .into_iter()
            .filter(|k| !["vision_tower", "multi_modal_projector", "lm_head"].iter().any(|p| k.contains(p)))
            .collect();
        if let Some(first) = unused.first() {
            tracing::warn!(component = "text_encoder", count = unused.len(), first = %first, "checkpoint tensors not used by the model");
        }
        Ok(enc)
    }

    /// Builds it from `w` (the language model under one of the known prefixes).
    pub fn new(cfg: GemmaConfig, w: &Weights) -> Result<Self> {
        let Some(prefix) = PREFIXES.iter().find(|p| w.contains(&format!("{p}.embed_tokens.weight"))) else {
            bail!("no Gemma language model: none of {} holds `embed_tokens.weight`", PREFIXES.join(", "));
        };
        let w = w.pp(prefix);
        let kinds = cfg.layer_kinds();
        ensure!(
            kinds.len() == cfg.num_hidden_layers,
            "layer_types has {} entries for {} layers",
            kinds.len(),
            cfg.num_hidden_layers
        );
        let layers = kinds
            .iter()
            .enumerate()
            .map(|(i, &sliding)| Layer::new(&w.pp("layers").pp(i), &cfg, sliding))
            .collect::<Result<_>>()?;
        Ok(Self {
            embed: w.get("embed_tokens.weight", &[cfg.vocab_size, cfg.hidden_size])?,
            embed_scale: (cfg.hidden_size as f64).sqrt(),
            norm: GemmaNorm::new(&w.pp("norm"), cfg.hidden_size, cfg.rms_norm_eps)?,
            layers,
            cfg,
        })
    }

    /// `ids [B, L]` with `mask [B, L]` (1 token, 0 padding, padded on the left) → every hidden
    /// state `[B, L, C, layers + 1]`: the embeddings, each layer's output, the last after the
    /// final norm (the pipeline's `torch.stack(hidden_states, dim=-1)`).
    pub fn forward(&self, ids: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let kind = self.embed.kind();
        let masks = Masks::new(mask, &self.cfg, kind)?;
        // The scale in the weights' type first, as transformers multiplies by it.
        let scale = Tensor::from(self.embed_scale).to_kind(kind).to_device(self.embed.device());
        let mut x = self.embed.index_select(0, &ids.flatten(0, -1)).view([ids.size()[0], ids.size()[1], -1]) * scale;
        let mut states = Vec::with_capacity(self.layers.len() + 1);
        states.push(x.shallow_clone());
        for (i, layer) in self.layers.iter().enumerate() {
            x = layer.forward(&x, &self.cfg, &masks);
            states.push(match i + 1 == self.layers.len() {
                true => self.norm.forward(&x),
                false => x.shallow_clone(),
            });
        }
        Ok(Tensor::stack(&states, -1))
    }
}
