//! One mixture-of-transformers decoder layer: each pathway its own pre-norms and MLP, one joint
//! attention between them.

use anyhow::Result;
use fastvideo_torch::weights::Weights;
use tch::Tensor;

use crate::attention::{LayerKv, MotAttention};
use crate::config::{Activation, Cosmos3Config};
use crate::mlp::Mlp;
use crate::norm::RmsNorm;

/// One decoder layer.
pub struct MotLayer {
    input_layernorm: RmsNorm,
    input_layernorm_moe_gen: RmsNorm,
    post_attention_layernorm: RmsNorm,
    post_attention_layernorm_moe_gen: RmsNorm,
    self_attn: MotAttention,
    mlp: Mlp,
    mlp_moe_gen: Mlp,
}

impl MotLayer {
    /// Reads `layers.{i}` under `w`.
    pub fn new(w: &Weights, c: &Cosmos3Config, act: Activation) -> Result<Self> {
        let norm = |name: &str| RmsNorm::new(&w.pp(name), c.hidden_size, c.rms_norm_eps, act);
        let mlp = |name: &str| Mlp::new(&w.pp(name), c.hidden_size, c.intermediate_size, act);
        Ok(Self {
            input_layernorm: norm("input_layernorm")?,
            input_layernorm_moe_gen: norm("input_layernorm_moe_gen")?,
            post_attention_layernorm: norm("post_attention_layernorm")?,
            post_attention_layernorm_moe_gen: norm("post_attention_layernorm_moe_gen")?,
            self_attn: MotAttention::new(&w.pp("self_attn"), c, act)?,
            mlp: mlp("mlp")?,
            mlp_moe_gen: mlp("mlp_moe_gen")?,
        })
    }

    /// The text pathway as a Qwen3 decoder layer on the same tensors; `None` for layouts that
    /// are not Qwen3 (Edge: relu², no text q/k norms).
    pub fn text_layer(&self) -> Option<fastvideo_qwen::shared::SharedLayer> {
        let (qkv, o, q_norm, k_norm) = self.self_attn.text_shared()?;
        let (gate_up, down) = self.mlp.shared()?;
        Some(fastvideo_qwen::shared::SharedLayer {
            input_layernorm: self.input_layernorm.weight(),
            qkv,
            o,
            q_norm,
            k_norm,
            post_attention_layernorm: self.post_attention_layernorm.weight(),
            gate_up,
            down,
        })
    }

    /// Bytes of its weights: `(text pathway, generation pathway)`.
    pub fn bytes(&self) -> (u64, u64) {
        let (und, gen) = self.self_attn.bytes();
        (
            und + self.input_layernorm.bytes() + self.post_attention_layernorm.bytes() + self.mlp.bytes(),
            gen + self.input_layernorm_moe_gen.bytes()
                + self.post_attention_layernorm_moe_gen.bytes()
                + self.mlp_moe_gen.bytes(),
        )
    }

    /// The text pathway of one prompt `u [1, L, C]` (updated in place unless `keys_only`): its
    /// keys and values for the generation stream.
    pub fn prefix(&self, u: &Tensor, rope: (&Tensor, &Tensor), keys_only: bool) -> LayerKv {
        let kv = self.self_attn.prefix(&self.input_layernorm.forward(u), u, rope, keys_only);
        if !keys_only {
            self.mlp.forward_add(u, &self.post_attention_layernorm.forward(u));
        }
        kv
    }

    /// The generation pathway of `B` branches `g [B, L, C]`, updated in place.
    pub fn generation(&self, g: &Tensor, rope: &crate::attention::GenRope, prefixes: &[&LayerKv]) {
        self.self_attn.generation(&self.input_layernorm_moe_gen.forward(g), g, rope, prefixes);
        self.mlp_moe_gen.forward_add(g, &self.post_attention_layernorm_moe_gen.forward(g));
    }
}
