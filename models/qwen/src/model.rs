//! The causal LM: token embedding, the decoder layers, the final norm and the LM head (the
//! embedding itself when `tie_word_embeddings`), loaded from a transformers-layout folder
//! (`config.json`, `model.safetensors` or sharded with its index).

use std::path::Path;

use anyhow::{bail, ensure, Context, Result};
use fastvideo_pipeline::token::{ContiguousKv, KvShape, KvStore, PagedBatch, PagedPlan};
use fastvideo_torch::weights::Weights;
use tch::{Device, Kind, Tensor};

use crate::config::QwenConfig;
use crate::decode_graph::DecodeGraphs;
use crate::layer::DecoderLayer;
use crate::rms_norm::RmsNorm;
use crate::rope::Rope;

/// A Qwen3 or Qwen2.5 causal LM, as the decode loop runs it (its `CausalLm`).
pub struct QwenForCausalLM {
    /// The folder's `config.json`.
    pub config: QwenConfig,
    embed_tokens: Tensor,
    layers: Vec<DecoderLayer>,
    norm: RmsNorm,
    lm_head: Tensor,
    rope: Rope,
    kind: Kind,
    /// The batched paged decode step as CUDA graphs, where the device can capture them.
    graphs: Option<DecodeGraphs>,
}

// SAFETY: the weights are read-only after `load` (no method takes `&mut self`), and libtorch's
// tensor reads are thread-safe; the per-request state lives in each request's `KvStore`. The same
// reasoning as fastvideo-wan's models. The decode graphs sit behind their own mutex.
unsafe impl Sync for QwenForCausalLM {}

impl QwenForCausalLM {
    /// Loads a transformers-layout folder (`config.json`, `model.safetensors` or shards) onto
    /// `device` in `kind`.
    pub fn load(dir: &Path, device: Device, kind: Kind) -> Result<Self> {
        let config = QwenConfig::load(&dir.join("config.json"))?;
        let w = Weights::from_dir(dir, "model", device, kind).with_context(|| format!("{}", dir.display()))?;
        let lm = Self::from_weights(config, &w)?;
        w.warn_unused("language model");
        Ok(lm)
    }

    /// The model of `config` on checkpoint `w` (its device and dtype): random weights for
    /// benchmarks, or a folder's.
    pub fn from_weights(config: QwenConfig, w: &Weights) -> Result<Self> {
        let (device, kind) = (w.device(), w.kind());
        let c = &config;
        let m = w.pp("model");
        let embed_tokens = m.get("embed_tokens.weight", &[c.vocab_size, c.hidden_size])?;
        let layers = (0..c.num_hidden_layers)
            .map(|i| DecoderLayer::new(&m.pp(format!("layers.{i}")), c))
            .collect::<Result<Vec<_>>>()?;
        let norm = RmsNorm::new(&m.pp("norm"), c.hidden_size, c.rms_norm_eps)?;
        let lm_head = if c.tie_word_embeddings {
            embed_tokens.shallow_clone()
        } else {
            w.get("lm_head.weight", &[c.vocab_size, c.hidden_size])?
        };
        let rope = Rope::new(c.head_dim, c.rope_theta, device);
        let graphs = DecodeGraphs::for_device(device);
        Ok(Self { config, embed_tokens, layers, norm, lm_head, rope, kind, graphs })
    }

    /// A Qwen3 decoder on weights another model already holds (an omni model's text pathway):
    /// the tensors are shared, not copied; only the per-head q/k norm tables are new (a few KiB).
    pub fn from_shared(config: QwenConfig, w: crate::shared::SharedWeights, kind: Kind) -> Self {
        let device = w.embed_tokens.device();
        let eps = config.rms_norm_eps;
        let layers = w.layers.into_iter().map(|l| DecoderLayer::from_shared(l, &config)).collect();
        let rope = Rope::new(config.head_dim, config.rope_theta, device);
        Self {
            embed_tokens: w.embed_tokens,
            layers,
            norm: RmsNorm::from_weight(w.norm, eps),
            lm_head: w.lm_head,
            rope,
            kind,
            graphs: DecodeGraphs::for_device(device),
            config,
        }
    }

    /// Address of the token embedding's storage: tests check that a shared decoder holds no
    /// copy of its owner's weights.
    pub fn embed_tokens_ptr(&self) -> *mut std::ffi::c_void {
        self.embed_tokens.data_ptr()
    }

    /// A fresh contiguous cache for this model.
    pub fn cache(&self) -> ContiguousKv {
        ContiguousKv::new(self.layers.len())
    }

    /// Its compute dtype.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Parameters held (the tied head counted once).
    pub fn parameter_count(&self) -> i64 {
        let c = &self.config;
        let (h, d) = (c.hidden_size, c.head_dim);
        let attn = h * d * (c.num_attention_heads * 2 + c.num_key_value_heads * 2);
        let mlp = 3 * h * c.intermediate_size;
        let embed = c.vocab_size * h * if c.tie_word_embeddings { 1 } else { 2 };
        c.num_hidden_layers * (attn + mlp) + embed
    }

    /// Where its weights live.
    pub fn device(&self) -> Device {
        self.embed_tokens.device()
    }

    /// The shape of its key/value cache.
    pub fn kv_shape(&self) -> KvShape {
        KvShape { layers: self.layers.len(), kv_heads: self.config.num_key_value_heads, head_dim: self.config.head_dim }
    }

    /// Logits `[B, T, vocab]` (the model's dtype) for `tokens [B, T]` following the positions
    /// already in `cache`, whose keys and values it extends.
    pub fn forward(&self, tokens: &Tensor, cache: &mut dyn KvStore) -> Result<Tensor> {
        let (_, t) = tokens.size2().context("tokens are [B, T]")?;
        ensure!(
            cache.len() + t <= self.config.max_position_embeddings,
            "{} positions exceed max_position_embeddings {}",
            cache.len() + t,
            self.config.max_position_embeddings
        );
        let (cos, sin) = self.rope.tables(cache.len(), t, self.kind);
        let mut x = Tensor::embedding(&self.embed_tokens, tokens, -1, false, false);
        for (i, layer) in self.layers.iter().enumerate() {
            x = layer.forward(x, (&cos, &sin), cache, i)?;
        }
        cache.advance(t);
        Ok(self.norm.forward(&x).linear(&self.lm_head, None::<Tensor>))
    }

    /// The token embeddings `[B, T, C]` of `tokens [B, T]`.
    pub fn embed(&self, tokens: &Tensor) -> Tensor {
        Tensor::embedding(&self.embed_tokens, tokens, -1, false, false)
    }

    /// Hidden states of right-padded prompts `tokens [B, T]` (row `b` has `lengths[b]` real
    /// tokens), as transformers' `output_hidden_states` numbers them: 0 the embeddings, `i` the
    /// output of layer `i`, the last one after the final norm. Each query sees the real keys up
    /// to its own position (padding queries too, as transformers' padding mask does). Only the
    /// layers up to the deepest asked for run: what a text encoder read at intermediate layers
    /// needs.
    pub fn hidden_states(&self, tokens: &Tensor, lengths: &[i64], wanted: &[usize]) -> Result<Vec<Tensor>> {
        let (_, t) = tokens.size2().context("tokens are [B, T]")?;
        ensure!(t <= self.config.max_position_embeddings, "{t} positions exceed max_position_embeddings");
        let rope = self.rope.tables(0, t, self.kind);
        self.hidden_states_of(self.embed(tokens), (&rope.0, &rope.1), lengths, wanted)
    }

    /// [`Self::hidden_states`] of given input embeddings `x [B, T, C]` (a prompt with pictures'
    /// features in it) rotated by `rope` (tables `[T, head_dim]`, e.g. [`Rope::tables_3d`]).
    pub fn hidden_states_of(
        &self,
        x: Tensor,
        rope: (&Tensor, &Tensor),
        lengths: &[i64],
        wanted: &[usize],
    ) -> Result<Vec<Tensor>> {
        let (b, t, _) = x.size3().context("embeddings are [B, T, C]")?;
        let n = self.layers.len();
        ensure!(lengths.len() == b as usize, "one length per row");
        if let Some(&bad) = wanted.iter().find(|&&i| i > n) {
            bail!("hidden state {bad} asked of a model of {n} layers");
        }
        let device = x.device();
        let pos = Tensor::arange(t, (Kind::Int64, device));
        let causal = pos.view([1, t]).le_tensor(&pos.view([t, 1]));
        let real = pos.view([1, t]).lt_tensor(&Tensor::from_slice(lengths).to_device(device).view([b, 1]));
        let mask = causal.unsqueeze(0).logical_and(&real.unsqueeze(1)).unsqueeze(1);
        let deepest = wanted.iter().copied().max().unwrap_or(0);
        let mut x = x;
        let mut states: Vec<Option<Tensor>> = (0..=deepest).map(|_| None).collect();
        if wanted.contains(&0) {
            states[0] = Some(x.copy());
        }
        for (i, layer) in self.layers.iter().enumerate().take(deepest) {
            x = layer.forward_masked(x, rope, &mask);
            if wanted.contains(&(i + 1)) {
                // Copies: the stream is updated in place by the next layer.
                states[i + 1] = Some(if i + 1 == n { self.norm.forward(&x) } else { x.copy() });
            }
        }
        Ok(wanted.iter().map(|&i| states[i].as_ref().expect("ran").shallow_clone()).collect())
    }

    /// Its rotary frequencies (for multimodal position tables).
    pub fn rope(&self) -> &Rope {
        &self.rope
    }

    /// Logits `[B, vocab]` for one new token of each of `B` requests, each after its own cache's
    /// positions: the batched decode step.
    pub fn forward_decode(&self, tokens: &[i64], caches: &mut [&mut dyn KvStore]) -> Result<Tensor> {
        ensure!(tokens.len() == caches.len() && !tokens.is_empty(), "one token per cache");
        for c in caches.iter() {
            ensure!(c.len() < self.config.max_position_embeddings, "a request is at max_position_embeddings");
        }
        let b = tokens.len() as i64;
        let device = self.embed_tokens.device();
        if let Some(plan) = PagedPlan::new(caches)? {
            let graphed = match &self.graphs {
                Some(g) => g.run(tokens, &plan, |ids, batch| self.decode_paged(ids, batch))?,
                None => None,
            };
            let logits = match graphed {
                Some(logits) => logits,
                None => {
                    let ids = Tensor::from_slice(tokens).to_device(device).view([b, 1]);
                    self.decode_paged(&ids, &PagedBatch::upload(plan))
                }
            };
            for c in caches.iter_mut() {
                c.advance(1);
            }
            return Ok(logits);
        }
        let ids = Tensor::from_slice(tokens).to_device(device).view([b, 1]);
        let (cos, sin): (Vec<Tensor>, Vec<Tensor>) =
            caches.iter().map(|c| self.rope.tables(c.len(), 1, self.kind)).unzip();
        let (cos, sin) = (Tensor::stack(&cos, 0).unsqueeze(1), Tensor::stack(&sin, 0).unsqueeze(1));
        let mut x = Tensor::embedding(&self.embed_tokens, &ids, -1, false, false);
        for (i, layer) in self.layers.iter().enumerate() {
            x = layer.forward_rows(x, (&cos, &sin), caches, i)?;
        }
        for c in caches.iter_mut() {
            c.advance(1);
        }
        Ok(self.norm.forward(&x).linear(&self.lm_head, None::<Tensor>).squeeze_dim(1))
    }

    /// Logits `[B, vocab]` of one new token per row (`ids [B, 1]`) on the pages `batch`
    /// addresses: device work only, so a CUDA graph can capture it.
    fn decode_paged(&self, ids: &Tensor, batch: &PagedBatch) -> Tensor {
        let (cos, sin) = self.rope.tables_at(batch.positions(), self.kind);
        let mut x = Tensor::embedding(&self.embed_tokens, ids, -1, false, false);
        for (i, layer) in self.layers.iter().enumerate() {
            x = layer.forward_paged(x, (&cos, &sin), batch, i);
        }
        self.norm.forward(&x).linear(&self.lm_head, None::<Tensor>).squeeze_dim(1)
    }

    /// Greedy continuation of `prompt` by `n` tokens (no stop token): the reference the decode
    /// loop's sampler and paged cache are checked against.
    pub fn greedy(&self, prompt: &[i64], n: usize) -> Result<Vec<i64>> {
        let device = self.embed_tokens.device();
        let mut cache = self.cache();
        let mut input = Tensor::from_slice(prompt).to_device(device).unsqueeze(0);
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let logits = self.forward(&input, &mut cache)?;
            let next = logits.select(1, -1).argmax(-1, false).int64_value(&[0]);
            out.push(next);
            input = Tensor::from_slice(&[next]).to_device(device).unsqueeze(0);
        }
        Ok(out)
    }
}
