//! `UMT5EncoderModel` (transformers `models/umt5/modeling_umt5.py`): a T5 encoder whose every
//! layer has its own relative-position bias. Pre-norm (RMS) blocks, unscaled dot-product
//! attention with the bias added, gated-GELU feed-forward.

use std::path::Path;

use anyhow::{ensure, Result};
use fastvideo_layers::block_stream::{self, BlockStream, StreamPlan};
use fastvideo_layers::config::{read_config_with, unsupported, TRANSFORMERS_BOOKKEEPING};
use fastvideo_layers::heads::{merge_heads, split_heads};
use fastvideo_layers::Linear;
use serde::Deserialize;
use tch::{Device, Kind, Tensor};

use crate::weights::Weights;

/// `text_encoder/config.json`. Decoder-side keys are accepted (the file describes the whole
/// encoder-decoder) and ignored, since only the encoder runs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Umt5Config {
    /// Rows of the token embedding.
    pub vocab_size: i64,
    /// Width of the hidden states.
    pub d_model: i64,
    /// Width of one attention head.
    pub d_kv: i64,
    /// Width of the feed-forward's inner layer.
    pub d_ff: i64,
    /// Encoder layers.
    pub num_layers: i64,
    /// Attention heads per layer.
    pub num_heads: i64,
    /// Buckets of the relative position bias.
    pub relative_attention_num_buckets: i64,
    /// Distance beyond which relative positions share the last bucket.
    pub relative_attention_max_distance: i64,
    /// The RMSNorms' epsilon.
    #[serde(default = "default_eps")]
    pub layer_norm_epsilon: f64,
    /// The feed-forward's activation, `gated-` first when gated (default `gated-gelu`, UMT5's).
    #[serde(default = "default_ff")]
    pub feed_forward_proj: String,
    /// The activation by name, overriding what `feed_forward_proj` implies.
    #[serde(default)]
    pub dense_act_fn: Option<String>,
    /// Whether the feed-forward is gated, overriding what `feed_forward_proj` implies.
    #[serde(default)]
    pub is_gated_act: Option<bool>,
    // Accepted, no effect on the encoder's inference.
    /// Training only: accepted, no effect on inference.
    #[serde(default)]
    pub dropout_rate: f64,
    /// Training only: accepted, no effect on inference.
    #[serde(default)]
    pub classifier_dropout: f64,
    /// Training only: accepted, no effect on inference.
    #[serde(default)]
    pub initializer_factor: f64,
    /// The decoder's: accepted and ignored (only the encoder runs).
    #[serde(default)]
    pub num_decoder_layers: Option<i64>,
    /// Accepted and ignored: only the encoder runs.
    #[serde(default)]
    pub is_encoder_decoder: Option<bool>,
    /// Accepted and ignored: only the encoder runs.
    #[serde(default)]
    pub is_decoder: Option<bool>,
    /// Accepted; the embedding is read under either of its names whatever it says.
    #[serde(default)]
    pub tie_word_embeddings: Option<bool>,
    /// The decoder's: accepted and ignored.
    #[serde(default)]
    pub scale_decoder_outputs: Option<bool>,
    /// The decoder's: accepted and ignored.
    #[serde(default)]
    pub decoder_start_token_id: Option<i64>,
    /// Accepted and ignored: the tokenizer decides where a prompt ends.
    #[serde(default)]
    pub eos_token_id: Option<i64>,
    /// Accepted and ignored: the tokenizer pads.
    #[serde(default)]
    pub pad_token_id: Option<i64>,
    /// Accepted and ignored: the tokenizer is read from its own folder.
    #[serde(default)]
    pub tokenizer_class: Option<String>,
}

// Defaults of keys a folder may leave out: `UMT5Config.__init__`'s in
// `src/transformers/models/umt5/configuration_umt5.py` of transformers v5.24.0, the pinned version.
fn default_eps() -> f64 {
    1e-6
}
fn default_ff() -> String {
    "gated-gelu".into()
}

#[derive(Debug, Clone, Copy)]
enum Act {
    GeluTanh,
    Gelu,
    Relu,
}

impl Umt5Config {
    /// Reads `text_encoder/config.json`; unknown keys are refused, naming them.
    pub fn load(path: &Path) -> Result<Self> {
        // `scalable_attention` (in Wan-AI's published configs) is never read by transformers' UMT5.
        let cfg: Self = read_config_with(path, &[TRANSFORMERS_BOOKKEEPING, &["scalable_attention"]])?;
        if cfg.is_decoder == Some(true) {
            return Err(unsupported(path, "is_decoder", true, "an encoder config is required"));
        }
        cfg.activation(path)?;
        Ok(cfg)
    }

    fn gated(&self) -> bool {
        self.is_gated_act.unwrap_or_else(|| self.feed_forward_proj.starts_with("gated-"))
    }

    fn activation(&self, path: &Path) -> Result<Act> {
        let name = self.dense_act_fn.clone().unwrap_or_else(|| {
            let a = self.feed_forward_proj.trim_start_matches("gated-");
            if a == "gelu" {
                "gelu_new".into()
            } else {
                a.into()
            }
        });
        match name.as_str() {
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Ok(Act::GeluTanh),
            "gelu" => Ok(Act::Gelu),
            "relu" => Ok(Act::Relu),
            other => Err(unsupported(path, "dense_act_fn", other, "gelu_new, gelu_pytorch_tanh, gelu or relu")),
        }
    }
}

/// transformers' float16 guard after each residual add: clamp to the largest finite value (less
/// 1000 once an inf appeared). No-op for other dtypes.
fn clamp_f16(x: Tensor) -> Tensor {
    if x.kind() != Kind::Half {
        return x;
    }
    let max = 65504.0;
    let limit = if bool::try_from(x.isinf().any()).unwrap_or(false) { max - 1000.0 } else { max };
    x.clamp(-limit, limit)
}

/// T5's RMS layer norm (no mean subtraction, no bias), computed in float32.
struct T5Norm {
    weight: Tensor,
    eps: f64,
}

impl T5Norm {
    fn new(w: &Weights, dim: i64, eps: f64) -> Result<Self> {
        Ok(Self { weight: w.get("weight", &[dim])?, eps })
    }
    fn forward(&self, x: &Tensor) -> Tensor {
        let var = x.to_kind(Kind::Float).pow_tensor_scalar(2).mean_dim(-1, true, Kind::Float);
        (x * (var + self.eps).rsqrt()).to_kind(self.weight.kind()) * &self.weight
    }
}

struct Layer {
    norm_attn: T5Norm,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    rel_bias: Tensor,
    norm_ff: T5Norm,
    wi_0: Linear,
    wi_1: Option<Linear>,
    wo: Linear,
}

impl Layer {
    /// Its linears, in the order block streaming walks them.
    fn linears(&self) -> Vec<&Linear> {
        [
            Some(&self.q),
            Some(&self.k),
            Some(&self.v),
            Some(&self.o),
            Some(&self.wi_0),
            self.wi_1.as_ref(),
            Some(&self.wo),
        ]
        .into_iter()
        .flatten()
        .collect()
    }
}

/// The UMT5 encoder stack.
pub struct Umt5Encoder {
    /// The encoder's config.
    pub cfg: Umt5Config,
    embed: Tensor,
    layers: Vec<Layer>,
    final_norm: T5Norm,
    act: Act,
    /// Every linear by slot (what text-encoder adapters may target).
    modules: Vec<fastvideo_lora::TargetModule>,
    /// `--max-device-memory`: the last layers stream from host memory, and the token
    /// embedding (a sixth of UMT5-XXL) is looked up on the host.
    stream: Option<BlockStream>,
}

// SAFETY: weights are written once in `new` and only read afterwards (see the transformer).
unsafe impl Sync for Umt5Encoder {}

impl Umt5Encoder {
    /// Builds the encoder from `w`; `config_path` names the config in errors.
    pub fn new(cfg: Umt5Config, w: &Weights, config_path: &Path) -> Result<Self> {
        Self::new_streamed(cfg, w, config_path, None)
    }

    /// [`new`](Self::new), with the layers `plan` names streamed from host memory (parked as
    /// each loads) and the token embedding kept there.
    pub fn new_streamed(cfg: Umt5Config, w: &Weights, config_path: &Path, plan: Option<StreamPlan>) -> Result<Self> {
        let (d, inner, eps) = (cfg.d_model, cfg.num_heads * cfg.d_kv, cfg.layer_norm_epsilon);
        // Tied embeddings may be saved under either name.
        let embed_key = if w.contains("shared.weight") { "shared.weight" } else { "encoder.embed_tokens.weight" };
        let embed = match plan {
            Some(_) => w.with_device(Device::Cpu).get(embed_key, &[cfg.vocab_size, d])?,
            None => w.get(embed_key, &[cfg.vocab_size, d])?,
        };
        let gated = cfg.gated();
        let mut layers = Vec::new();
        let mut parked = Vec::new();
        for i in 0..cfg.num_layers {
            let b = w.pp("encoder.block").pp(i);
            let (a, f) = (b.pp("layer.0"), b.pp("layer.1"));
            let ff = f.pp("DenseReluDense");
            layers.push(Layer {
                norm_attn: T5Norm::new(&a.pp("layer_norm"), d, eps)?,
                q: Linear::new(&a.pp("SelfAttention.q"), d, inner, false)?,
                k: Linear::new(&a.pp("SelfAttention.k"), d, inner, false)?,
                v: Linear::new(&a.pp("SelfAttention.v"), d, inner, false)?,
                o: Linear::new(&a.pp("SelfAttention.o"), inner, d, false)?,
                rel_bias: a.get(
                    "SelfAttention.relative_attention_bias.weight",
                    &[cfg.relative_attention_num_buckets, cfg.num_heads],
                )?,
                norm_ff: T5Norm::new(&f.pp("layer_norm"), d, eps)?,
                wi_0: Linear::new(&ff.pp(if gated { "wi_0" } else { "wi" }), d, cfg.d_ff, false)?,
                wi_1: if gated { Some(Linear::new(&ff.pp("wi_1"), d, cfg.d_ff, false)?) } else { None },
                // transformers keeps `wo` in float32 for float16 models only (`_keep_in_fp32_modules`
                // applies to fp16 since 5.1); from the first feed-forward on, such a model's residual
                // stream is float32.
                wo: Linear::new(
                    &if ff.kind() == Kind::Half { ff.pp("wo").with_kind(Kind::Float) } else { ff.pp("wo") },
                    cfg.d_ff,
                    d,
                    false,
                )?,
            });
            if plan.is_some_and(|p| i as usize >= p.first) {
                let l = layers.last().expect("pushed above");
                parked.push(block_stream::park(&l.linears(), w.device()));
            }
        }
        let stream = match plan {
            Some(p) if !parked.is_empty() => Some(BlockStream::new(p.first, parked, p.slots, w.device())?),
            _ => None,
        };
        let act = cfg.activation(config_path)?;
        let final_norm = T5Norm::new(&w.pp("encoder.final_layer_norm"), d, eps)?;
        Ok(Self { final_norm, embed, layers, act, cfg, modules: w.linears(), stream })
    }

    /// Bidirectional relative-position buckets `[L, L]` (T5's log-spaced bucketing).
    fn buckets(&self, len: i64, device: tch::Device) -> Tensor {
        let nb = self.cfg.relative_attention_num_buckets / 2;
        let max_exact = nb / 2;
        let pos = Tensor::arange(len, (Kind::Int64, device));
        let rel = pos.unsqueeze(0) - pos.unsqueeze(1); // memory - query
        let base = rel.gt(0).to_kind(Kind::Int64) * nb;
        let rel = rel.abs();
        let is_small = rel.lt(max_exact);
        let large = (rel.to_kind(Kind::Float) / max_exact as f64).log()
            / ((self.cfg.relative_attention_max_distance as f64) / max_exact as f64).ln()
            * (nb - max_exact) as f64;
        let large = (large.to_kind(Kind::Int64) + max_exact).clamp_max(nb - 1);
        base + rel.where_self(&is_small, &large)
    }

    /// The linear modules text-encoder adapters may target, by slot.
    pub fn modules(&self) -> &[fastvideo_lora::TargetModule] {
        &self.modules
    }

    /// The layers streamed from host memory, if any (`--max-device-memory`).
    pub fn block_stream(&self) -> Option<&BlockStream> {
        self.stream.as_ref()
    }

    /// Each module's weight dtype, by slot.
    pub fn module_kinds(&self) -> Vec<Kind> {
        let mut kinds = vec![self.embed.kind(); self.modules.len()];
        for l in &self.layers {
            for lin in l.linears() {
                for p in lin.parts() {
                    kinds[p.slot] = lin.weight.kind();
                }
            }
        }
        kinds
    }

    /// `input_ids [B, L]`, `mask [B, L]` (1 = token, 0 = padding) → `last_hidden_state [B, L, d]`.
    pub fn forward(&self, input_ids: &Tensor, mask: &Tensor) -> Result<Tensor> {
        self.forward_lora(input_ids, mask, None)
    }

    /// [`forward`](Self::forward) with text-encoder adapters (unmerged) on every linear.
    pub fn forward_lora(&self, input_ids: &Tensor, mask: &Tensor, lora: fastvideo_layers::Lora) -> Result<Tensor> {
        let s = input_ids.size();
        ensure!(
            s.len() == 2 && mask.size() == s,
            "umt5: input_ids {s:?} and mask {:?} must both be [B, L]",
            mask.size()
        );
        let (b, len) = (s[0], s[1]);
        let dev = input_ids.device();
        let mut x = match self.embed.device() == dev {
            true => Tensor::embedding(&self.embed, input_ids, -1, false, false),
            false => Tensor::embedding(&self.embed, &input_ids.to_device(self.embed.device()), -1, false, false)
                .to_device(dev),
        };
        let buckets = self.buckets(len, dev);
        // Padding keys get the most negative value of the compute dtype, as transformers' additive
        // mask does (`(1 - mask) * finfo(dtype).min`).
        let kind = self.embed.kind();
        let min = match kind {
            Kind::BFloat16 => -3.389_531_4e38,
            Kind::Half => -65504.0,
            _ => f32::MIN as f64,
        };
        let pad = ((mask.to_kind(Kind::Float).ones_like() - mask.to_kind(Kind::Float)) * min).to_kind(kind);
        let pad = pad.view([b, 1, 1, len]);
        let h = self.cfg.num_heads;
        for (i, l) in self.layers.iter().enumerate() {
            if let Some(s) = &self.stream {
                s.before(i, &l.linears())?;
            }
            let n = l.norm_attn.forward(&x);
            let q = split_heads(&l.q.forward_lora(&n, lora), h);
            let k = split_heads(&l.k.forward_lora(&n, lora), h);
            let v = split_heads(&l.v.forward_lora(&n, lora), h);
            let bias = Tensor::embedding(&l.rel_bias, &buckets, -1, false, false).permute([2, 0, 1]).unsqueeze(0);
            let scores = q.matmul(&k.transpose(-1, -2)) + (bias + &pad);
            let attn = scores.softmax(-1, Kind::Float).to_kind(scores.kind()).matmul(&v);
            x = clamp_f16(&x + l.o.forward_lora(&merge_heads(&attn), lora));
            let n = l.norm_ff.forward(&x);
            let a = l.wi_0.forward_lora(&n, lora);
            let a = match self.act {
                Act::GeluTanh => a.gelu("tanh"),
                Act::Gelu => a.gelu("none"),
                Act::Relu => a.relu(),
            };
            let a = match &l.wi_1 {
                Some(wi_1) => a * wi_1.forward_lora(&n, lora),
                None => a,
            };
            let a = a.to_kind(l.wo.weight.kind());
            x = clamp_f16(&x + l.wo.forward_lora(&a, lora));
            if let Some(s) = &self.stream {
                s.after(i)?;
            }
        }
        Ok(self.final_norm.forward(&x))
    }
}
