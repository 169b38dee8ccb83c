//! `WanTransformer3DModel` (diffusers `models/transformers/transformer_wan.py`, Wan 2.1 T2V):
//! patchify with a 3-D conv, 3-D rotary embeddings, blocks of (adaLN-modulated self-attention
//! with RMSNorm on q/k across heads, cross-attention to the text, gated GELU feed-forward), an
//! adaLN output head and unpatchify. Module names equal checkpoint keys.

use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::{ensure, Result};
use fastvideo_pipeline::{BlockAction, BlockHook};
use serde::Deserialize;
use tch::{Device, Kind, Tensor};

use crate::config::{read_config, unsupported};
use crate::nn::{merge_heads, split_heads, Linear};
use crate::sequence_parallel::{ulysses_attention, SequenceShard};
use crate::weights::Weights;
use fastvideo_parallel::Communicator;

/// `transformer/config.json`. Defaults are Wan2.1-T2V-14B's (diffusers class defaults).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TransformerConfig {
    pub patch_size: [i64; 3],
    pub num_attention_heads: i64,
    pub attention_head_dim: i64,
    pub in_channels: i64,
    pub out_channels: Option<i64>,
    pub text_dim: i64,
    pub freq_dim: i64,
    pub ffn_dim: i64,
    pub num_layers: i64,
    pub cross_attn_norm: bool,
    pub qk_norm: Option<String>,
    pub eps: f64,
    pub image_dim: Option<i64>,
    pub added_kv_proj_dim: Option<i64>,
    pub rope_max_seq_len: i64,
    pub pos_embed_seq_len: Option<i64>,
}

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
        }
    }
}

impl TransformerConfig {
    pub fn load(path: &Path) -> Result<Self> {
        let cfg: Self = read_config(path)?;
        if cfg.qk_norm.as_deref() != Some("rms_norm_across_heads") {
            return Err(unsupported(path, "qk_norm", format!("{:?}", cfg.qk_norm), "only \"rms_norm_across_heads\""));
        }
        if let Some(v) = cfg.image_dim {
            return Err(unsupported(path, "image_dim", v, "image-to-video is not implemented; use null"));
        }
        if let Some(v) = cfg.added_kv_proj_dim {
            return Err(unsupported(path, "added_kv_proj_dim", v, "image-to-video is not implemented; use null"));
        }
        if let Some(v) = cfg.pos_embed_seq_len {
            return Err(unsupported(path, "pos_embed_seq_len", v, "use null"));
        }
        ensure!(
            cfg.attention_head_dim % 2 == 0 && cfg.freq_dim % 2 == 0,
            "{}: attention_head_dim and freq_dim must be even",
            path.display()
        );
        Ok(cfg)
    }
    /// The published shapes by name, for benchmarks with random weights: `wan-1.3b`
    /// (Wan2.1-T2V-1.3B) and `wan-14b` (Wan2.1-T2V-14B, the class defaults).
    pub fn preset(name: &str) -> Result<Self> {
        match name {
            "wan-14b" => Ok(Self::default()),
            "wan-1.3b" => Ok(Self { num_attention_heads: 12, ffn_dim: 8960, num_layers: 30, ..Self::default() }),
            other => anyhow::bail!("unknown transformer shape `{other}` (wan-1.3b or wan-14b, or a config.json path)"),
        }
    }

    pub fn inner_dim(&self) -> i64 {
        self.num_attention_heads * self.attention_head_dim
    }
    pub fn out_channels(&self) -> i64 {
        self.out_channels.unwrap_or(self.in_channels)
    }
}

/// Self-attention with q/k RMSNorm across all heads and rotary positions. q and k come from one
/// fused projection (`to_q`/`to_k` concatenated at load), which the norm kernel reads in place;
/// v has its own projection so it is dense, as every SDPA backend expects without copying.
struct SelfAttention {
    to_qk: Linear,
    to_v: Linear,
    to_out: Linear,
    norm_q: Tensor,
    norm_k: Tensor,
    heads: i64,
    eps: f64,
}

impl SelfAttention {
    fn new(w: &Weights, dim: i64, heads: i64, eps: f64) -> Result<Self> {
        let qk = [Linear::new(&w.pp("to_q"), dim, dim, true)?, Linear::new(&w.pp("to_k"), dim, dim, true)?];
        Ok(Self {
            to_qk: Linear::concat(&qk),
            to_v: Linear::new(&w.pp("to_v"), dim, dim, true)?,
            to_out: Linear::new(&w.pp("to_out.0"), dim, dim, true)?,
            norm_q: w.get("norm_q.weight", &[dim])?,
            norm_k: w.get("norm_k.weight", &[dim])?,
            heads,
            eps,
        })
    }

    /// Returns the output and, with `keep_kv`, this input's keys (normalised, rotated) and values
    /// for a causal rollout to keep (otherwise they are freed at once: held through the rest of the
    /// block they cost 0.3 GiB of peak memory at 480x832x81). `keys` says what else is attended:
    /// earlier frames and a mask, or the rest of a sequence other ranks hold.
    fn forward(&self, x: &Tensor, rope: &Rope, keys: Keys, keep_kv: bool) -> Result<(Tensor, Option<KeyValues>)> {
        let d = self.norm_q.size()[0];
        // Each intermediate is freed as soon as it is used (the fused projection right after the
        // norm, q/k/v before the output projection): at 32,760 tokens each is 0.1-0.2 GiB, and
        // they add up in the peak.
        let (q, k) = {
            let qk = self.to_qk.forward(x);
            let mut qk = fastvideo_kernels::rms_norm_rope(
                &[(&qk.narrow(2, 0, d), &self.norm_q), (&qk.narrow(2, d, d), &self.norm_k)],
                self.eps,
                d / self.heads,
                Some((&rope.cos, &rope.sin)),
            );
            let k = qk.pop().expect("k");
            (qk.pop().expect("q"), k)
        };
        let v = self.to_v.forward(x);
        let o = match keys {
            Keys::Local { past: Some((pk, pv)), mask } => {
                let (keys, values) = (Tensor::cat(&[pk, &k], 1), Tensor::cat(&[pv, &v], 1));
                attention(&q, &keys, &values, self.heads, mask)
            }
            Keys::Local { past: None, mask } => attention(&q, &k, &v, self.heads, mask),
            Keys::Sharded(shard) => ulysses_attention(&q, &k, &v, self.heads, shard)?,
        };
        drop(q);
        let kept = keep_kv.then_some((k, v));
        Ok((self.to_out.forward(&merge_heads(&o)), kept))
    }
}

/// Cross-attention to the text: q from the video tokens, k and v from the context, q and k
/// RMS-normalised across heads, no rotary positions.
struct CrossAttention {
    to_q: Linear,
    to_k: Linear,
    to_v: Linear,
    to_out: Linear,
    norm_q: Tensor,
    norm_k: Tensor,
    heads: i64,
    eps: f64,
}

impl CrossAttention {
    fn new(w: &Weights, dim: i64, heads: i64, eps: f64) -> Result<Self> {
        Ok(Self {
            to_q: Linear::new(&w.pp("to_q"), dim, dim, true)?,
            to_k: Linear::new(&w.pp("to_k"), dim, dim, true)?,
            to_v: Linear::new(&w.pp("to_v"), dim, dim, true)?,
            to_out: Linear::new(&w.pp("to_out.0"), dim, dim, true)?,
            norm_q: w.get("norm_q.weight", &[dim])?,
            norm_k: w.get("norm_k.weight", &[dim])?,
            heads,
            eps,
        })
    }

    /// The text's keys (normalised) and values: what a session computes once and reuses.
    fn context_kv(&self, context: &Tensor) -> (Tensor, Tensor) {
        let hd = self.norm_q.size()[0] / self.heads;
        let mut k =
            fastvideo_kernels::rms_norm_rope(&[(&self.to_k.forward(context), &self.norm_k)], self.eps, hd, None);
        (k.pop().expect("k"), self.to_v.forward(context))
    }

    fn forward(&self, x: &Tensor, context: Cross) -> Tensor {
        let hd = self.norm_q.size()[0] / self.heads;
        let q = fastvideo_kernels::rms_norm_rope(&[(&self.to_q.forward(x), &self.norm_q)], self.eps, hd, None);
        let o = match context {
            Cross::Text(c) => {
                let (k, v) = self.context_kv(c);
                attention(&q[0], &k, &v, self.heads, None)
            }
            Cross::Kv(k, v) => attention(&q[0], k, v, self.heads, None),
        };
        drop(q);
        self.to_out.forward(&merge_heads(&o))
    }
}

/// A self-attention's keys and values (`[B, N, H*D]` each).
pub type KeyValues = (Tensor, Tensor);

/// What a self-attention attends to besides its own input's keys.
#[derive(Clone, Copy)]
pub enum Keys<'a> {
    /// Keys/values of earlier frames (attended before this input's own; a causal rollout's) and
    /// a mask (`[N, M]`, true = attend) restricting which keys each query sees.
    Local { past: Option<(&'a Tensor, &'a Tensor)>, mask: Option<&'a Tensor> },
    /// The whole sequence, of which this rank holds one slice (Ulysses sequence parallelism).
    Sharded(&'a SequenceShard),
}

impl Keys<'_> {
    /// The input's own keys only.
    pub const OWN: Keys<'static> = Keys::Local { past: None, mask: None };
}

/// What the cross-attention attends to: the projected text, or its keys and values computed
/// once (a causal session's).
#[derive(Clone, Copy)]
pub enum Cross<'a> {
    Text(&'a Tensor),
    Kv(&'a Tensor, &'a Tensor),
}

impl Block {
    /// Keys and values of `context` for this block's cross-attention.
    pub fn context_kv(&self, context: &Tensor) -> (Tensor, Tensor) {
        self.attn2.context_kv(context)
    }
}

/// `[B, N, H*D]` q, k, v → SDPA over heads → `[B, H, N, D]`. libtorch picks the backend (cuDNN's
/// fused attention for bf16 on Hopper, the fastest of the three measured: docs/benchmarks.md).
fn attention(q: &Tensor, k: &Tensor, v: &Tensor, heads: i64, mask: Option<&Tensor>) -> Tensor {
    let (q, k, v) = (split_heads(q, heads), split_heads(k, heads), split_heads(v, heads));
    Tensor::scaled_dot_product_attention(&q, &k, &v, mask, 0.0, false, None, false)
}

/// Latent grid (frames, height, width after patching), first frame position and device a
/// [`Rope`] was built for.
type RopeKey = (i64, i64, i64, i64, Device);

/// Rotary tables for one input shape: `cos`/`sin` are `[N, D/2]` float32 (one value per rotated
/// pair), as diffusers keeps them in float32 whatever the model's dtype.
pub struct Rope {
    cos: Tensor,
    sin: Tensor,
}

impl Rope {
    /// Per-axis frequencies as in diffusers' `WanRotaryPosEmbed`: the head dim splits into
    /// t/h/w parts (h = w = 2*(D/6), t = the rest), each with `1/theta^(2i/dim)` frequencies;
    /// frames at positions `first_frame..first_frame + grid[0]` (0.. for a whole clip, a causal
    /// chunk's absolute positions otherwise).
    pub fn at(head_dim: i64, grid: [i64; 3], first_frame: i64, device: Device) -> Self {
        let hw = 2 * (head_dim / 6);
        let dims = [head_dim - 2 * hw, hw, hw];
        let (f, h, w) = (grid[0], grid[1], grid[2]);
        let mut parts = Vec::new();
        for (axis, &dim) in dims.iter().enumerate() {
            let inv = Tensor::arange_start_step(0, dim, 2, (Kind::Double, Device::Cpu)) / dim as f64;
            let inv = Tensor::from(10000f64).pow(&inv).reciprocal();
            let first = if axis == 0 { first_frame } else { 0 };
            let pos = Tensor::arange_start(first, first + grid[axis], (Kind::Double, Device::Cpu));
            let ang = pos.outer(&inv); // [len, dim/2]
            let view: [i64; 4] = match axis {
                0 => [f, 1, 1, -1],
                1 => [1, h, 1, -1],
                _ => [1, 1, w, -1],
            };
            parts.push(ang.view(view).expand([f, h, w, dim / 2], false));
        }
        let ang = Tensor::cat(&parts, -1).reshape([f * h * w, head_dim / 2]);
        Self {
            cos: ang.cos().to_kind(Kind::Float).to_device(device),
            sin: ang.sin().to_kind(Kind::Float).to_device(device),
        }
    }

    fn shallow_clone(&self) -> Self {
        Self { cos: self.cos.shallow_clone(), sin: self.sin.shallow_clone() }
    }

    /// The tables of tokens `start..start + len` (a sequence-parallel rank's slice).
    fn rows(&self, start: i64, len: i64) -> Self {
        Self { cos: self.cos.narrow(0, start, len), sin: self.sin.narrow(0, start, len) }
    }
}

/// One `WanTransformerBlock`. The modulation table and the cross-attention norm stay float32
/// (diffusers' `_keep_in_fp32_modules`); every norm and residual add runs in float32 and rounds
/// once, through the fused kernels of `fastvideo_kernels` (tch ops off CUDA).
pub struct Block {
    norm2: Option<(Tensor, Tensor)>,
    attn1: SelfAttention,
    attn2: CrossAttention,
    ffn_in: Linear,
    ffn_out: Linear,
    scale_shift_table: Tensor,
    eps: f64,
}

impl Block {
    fn new(w: &Weights, cfg: &TransformerConfig) -> Result<Self> {
        let dim = cfg.inner_dim();
        let heads = cfg.num_attention_heads;
        let fp32 = w.with_kind(Kind::Float);
        Ok(Self {
            attn1: SelfAttention::new(&w.pp("attn1"), dim, heads, cfg.eps)?,
            norm2: if cfg.cross_attn_norm {
                Some((fp32.get("norm2.weight", &[dim])?, fp32.get("norm2.bias", &[dim])?))
            } else {
                None
            },
            attn2: CrossAttention::new(&w.pp("attn2"), dim, heads, cfg.eps)?,
            ffn_in: Linear::new(&w.pp("ffn.net.0.proj"), dim, cfg.ffn_dim, true)?,
            ffn_out: Linear::new(&w.pp("ffn.net.2"), cfg.ffn_dim, dim, true)?,
            scale_shift_table: fp32.get("scale_shift_table", &[1, 6, dim])?,
            eps: cfg.eps,
        })
    }

    /// One block over `inputs`: `temb6` is the per-sample modulation `[B, 6, dim]` (any dtype;
    /// added to the table in fp32), `shard` a sequence-parallel rank's slice, if any.
    pub fn forward(&self, x: &Tensor, inputs: &BlockInputs) -> Result<Tensor> {
        let keys = inputs.shard.map_or(Keys::OWN, Keys::Sharded);
        Ok(self.forward_with(x, Cross::Text(inputs.context), inputs.temb6, inputs.rope, keys, false)?.0)
    }

    /// The block with what a causal rollout needs: `temb6` may be per token (`[B, N, 6, dim]`, one
    /// timestep per frame), `keys` go to the self-attention, and with `keep_kv` the
    /// self-attention's keys and values come back beside the output.
    pub fn forward_with(
        &self,
        x: &Tensor,
        context: Cross,
        temb6: &Tensor,
        rope: &Rope,
        keys: Keys,
        keep_kv: bool,
    ) -> Result<(Tensor, Option<KeyValues>)> {
        use fastvideo_kernels::{gated_residual, layer_norm_modulate, residual_layer_norm_modulate, LayerNormSpec};
        let m = modulation(&self.scale_shift_table, temb6, 6);
        let (shift, scale, gate, c_shift, c_scale, c_gate) = (&m[0], &m[1], &m[2], &m[3], &m[4], &m[5]);
        let eps = self.eps;
        // Each activation is dropped once used (shadowing would keep it to the end of the block):
        // at 32,760 tokens each is 0.1 GiB, the FFN's 0.55 GiB, and live ones add up in the peak.
        let (a, kv) = {
            let h = layer_norm_modulate(x, &LayerNormSpec { eps, affine: None, modulation: Some((scale, shift)) });
            self.attn1.forward(&h, rope, keys, keep_kv)?
        };
        let (x1, h) = match &self.norm2 {
            Some((w, b)) => residual_layer_norm_modulate(
                x,
                &a,
                Some(gate),
                &LayerNormSpec { eps, affine: Some((w, b)), modulation: None },
            ),
            None => {
                let x = gated_residual(x, &a, Some(gate));
                let h = x.shallow_clone();
                (x, h)
            }
        };
        drop(a);
        let a = self.attn2.forward(&h, context);
        drop(h);
        let (x2, h) = residual_layer_norm_modulate(
            &x1,
            &a,
            None,
            &LayerNormSpec { eps, affine: None, modulation: Some((c_scale, c_shift)) },
        );
        drop((x1, a));
        let g = self.ffn_in.forward_gelu_tanh(&h);
        drop(h);
        let ff = self.ffn_out.forward(&g);
        drop(g);
        Ok((gated_residual(&x2, &ff, Some(c_gate)), kv))
    }
}

/// `table [1, n, dim]` (fp32) plus the timestep modulation, split into its `n` parts: each
/// `[B, 1, dim]` for `temb [B, n, dim]`, or `[B, N, dim]` for per-token `temb [B, N, n, dim]`.
fn modulation(table: &Tensor, temb: &Tensor, n: i64) -> Vec<Tensor> {
    let temb = temb.to_kind(Kind::Float);
    if temb.dim() == 4 {
        (table.unsqueeze(0) + temb).chunk(n, 2).into_iter().map(|t| t.squeeze_dim(2)).collect()
    } else {
        (table + temb).chunk(n, 1)
    }
}

/// Everything a block needs besides the hidden states, computed once per forward.
pub struct BlockInputs<'a> {
    pub context: &'a Tensor,
    pub temb6: &'a Tensor,
    pub rope: &'a Rope,
    /// The sequence-parallel slice this rank holds (`rope` is already its rows), if any.
    pub shard: Option<&'a SequenceShard>,
}

/// The Wan 2.1 diffusion transformer.
pub struct WanTransformer3DModel {
    pub cfg: TransformerConfig,
    patch_weight: Tensor,
    patch_bias: Tensor,
    time_1: Linear,
    time_2: Linear,
    time_proj: Linear,
    text_1: Linear,
    text_2: Linear,
    pub blocks: Vec<Block>,
    proj_out: Linear,
    scale_shift_table: Tensor,
    /// Rotary tables of the last grid seen: every step (and every guidance branch) of a request
    /// reuses them instead of rebuilding them on the host and copying them to the device.
    rope_cache: Mutex<Option<(RopeKey, Rope)>>,
    /// The compute dtype (weights were converted to it at load).
    kind: Kind,
}

// SAFETY: every tensor is written once in `new` and only read afterwards; libtorch allows
// concurrent reads of a tensor from several threads.
unsafe impl Sync for WanTransformer3DModel {}

impl WanTransformer3DModel {
    pub fn new(cfg: TransformerConfig, w: &Weights) -> Result<Self> {
        let dim = cfg.inner_dim();
        let [pt, ph, pw] = cfg.patch_size;
        let ce = w.pp("condition_embedder");
        // diffusers keeps the timestep embedder and the modulation tables in float32.
        let time = ce.pp("time_embedder").with_kind(Kind::Float);
        let blocks = (0..cfg.num_layers).map(|i| Block::new(&w.pp("blocks").pp(i), &cfg)).collect::<Result<_>>()?;
        Ok(Self {
            patch_weight: w.get("patch_embedding.weight", &[dim, cfg.in_channels, pt, ph, pw])?,
            patch_bias: w.get("patch_embedding.bias", &[dim])?,
            time_1: Linear::new(&time.pp("linear_1"), cfg.freq_dim, dim, true)?,
            time_2: Linear::new(&time.pp("linear_2"), dim, dim, true)?,
            time_proj: Linear::new(&ce.pp("time_proj"), dim, 6 * dim, true)?,
            text_1: Linear::new(&ce.pp("text_embedder.linear_1"), cfg.text_dim, dim, true)?,
            text_2: Linear::new(&ce.pp("text_embedder.linear_2"), dim, dim, true)?,
            blocks,
            proj_out: Linear::new(&w.pp("proj_out"), dim, cfg.out_channels() * pt * ph * pw, true)?,
            scale_shift_table: w.with_kind(Kind::Float).get("scale_shift_table", &[1, 2, dim])?,
            kind: w.kind(),
            rope_cache: Mutex::new(None),
            cfg,
        })
    }

    /// Sinusoidal timestep features (`flip_sin_to_cos`, no frequency shift): `[B, freq_dim]`.
    fn timestep_features(&self, t: &Tensor) -> Tensor {
        let half = self.cfg.freq_dim / 2;
        let exponent = Tensor::arange(half, (Kind::Float, t.device())) * (-(10000f64.ln()) / half as f64);
        let args = t.to_kind(Kind::Float).unsqueeze(1) * exponent.exp().unsqueeze(0);
        Tensor::cat(&[args.cos(), args.sin()], -1)
    }

    fn rope(&self, f: i64, h: i64, w: i64, device: Device) -> Rope {
        self.rope_at(f, h, w, 0, device)
    }

    /// Tables for frames `first..first + f` (a causal chunk's), cached like [`rope`](Self::rope):
    /// a chunk's denoise steps and its commit pass share them.
    pub(crate) fn rope_at(&self, f: i64, h: i64, w: i64, first: i64, device: Device) -> Rope {
        let key = (f, h, w, first, device);
        let mut cache = self.rope_cache.lock().unwrap_or_else(|e| e.into_inner());
        match &*cache {
            Some((k, r)) if *k == key => r.shallow_clone(),
            _ => {
                let r = Rope::at(self.cfg.attention_head_dim, [f, h, w], first, device);
                *cache = Some((key, r.shallow_clone()));
                r
            }
        }
    }

    /// Runs the transformer blocks in order: the single place blocks are iterated, so a block
    /// policy (a block cache) can skip a range of them through `hook` without touching the model.
    pub fn run_blocks(&self, mut x: Tensor, inputs: &BlockInputs, hook: Option<&mut dyn BlockHook>) -> Result<Tensor> {
        let n = self.blocks.len();
        let Some(hook) = hook else {
            for block in &self.blocks {
                x = block.forward(&x, inputs)?;
            }
            return Ok(x);
        };
        hook.begin(n)?;
        let mut i = 0;
        while i < n {
            let out = self.blocks[i].forward(&x, inputs)?;
            match hook.after_block(i, &x, &out)? {
                BlockAction::Proceed => {
                    x = out;
                    i += 1;
                }
                BlockAction::SkipTo(to, hidden) => {
                    ensure!(to > i && to <= n, "block policy: skip from block {i} to {to} (of {n})");
                    ensure!(
                        hidden.size() == out.size(),
                        "block policy: hidden state {:?} where blocks produce {:?}",
                        hidden.size(),
                        out.size()
                    );
                    x = hidden;
                    i = to;
                }
            }
        }
        hook.end(&x)?;
        Ok(x)
    }

    /// `latents [B, C, F, H, W]`, `timestep [B]`, `context [B, L, text_dim]` → velocity with the
    /// latents' shape and dtype. Inputs of any float dtype are cast to the compute dtype.
    pub fn forward(&self, latents: &Tensor, timestep: &Tensor, context: &Tensor) -> Result<Tensor> {
        self.forward_hooked(latents, timestep, context, None)
    }

    /// [`forward`](Self::forward) with an optional block hook (see [`run_blocks`](Self::run_blocks)).
    pub fn forward_hooked(
        &self,
        latents: &Tensor,
        timestep: &Tensor,
        context: &Tensor,
        hook: Option<&mut dyn BlockHook>,
    ) -> Result<Tensor> {
        self.check_inputs(latents, timestep, context)?;
        let [_, f, h, w] = self.grid(latents);
        let rope = self.rope(f, h, w, latents.device());
        let x = self.patchify(latents);
        let (temb, temb6) = self.time_embedding(timestep);
        let context = self.text_context(context);
        let x =
            self.run_blocks(x, &BlockInputs { context: &context, temb6: &temb6, rope: &rope, shard: None }, hook)?;
        Ok(self.head(&x, &temb, latents))
    }

    /// Shapes of a forward's inputs, and the grid against the rotary table's length.
    fn check_inputs(&self, latents: &Tensor, timestep: &Tensor, context: &Tensor) -> Result<()> {
        let s = latents.size();
        let [pt, ph, pw] = self.cfg.patch_size;
        ensure!(
            s.len() == 5 && s[1] == self.cfg.in_channels && s[2] % pt == 0 && s[3] % ph == 0 && s[4] % pw == 0,
            "transformer: latents {s:?} must be [B, {}, F, H, W] divisible by patch {:?}",
            self.cfg.in_channels,
            self.cfg.patch_size
        );
        let c = context.size();
        ensure!(
            c.len() == 3 && c[0] == s[0] && c[2] == self.cfg.text_dim,
            "transformer: context {c:?} must be [{}, L, {}]",
            s[0],
            self.cfg.text_dim
        );
        ensure!(timestep.size() == [s[0]], "transformer: timestep {:?} must be [{}]", timestep.size(), s[0]);
        let [_, f, h, w] = self.grid(latents);
        ensure!(
            f.max(h).max(w) <= self.cfg.rope_max_seq_len,
            "transformer: grid {f}x{h}x{w} exceeds rope_max_seq_len {}",
            self.cfg.rope_max_seq_len
        );
        Ok(())
    }

    /// One rank's part of a sequence-parallel forward: the same inputs as
    /// [`forward`](Self::forward) on every rank of the group, this rank's slice of the tokens
    /// through the blocks (exchanging with the others around self-attention), and its slice of
    /// the output tokens `[B, n, C·pt·ph·pw]` back, for [`unpatchify`](Self::unpatchify) once the
    /// slices are joined in rank order.
    pub fn forward_rank(
        &self,
        latents: &Tensor,
        timestep: &Tensor,
        context: &Tensor,
        comm: Arc<dyn Communicator>,
    ) -> Result<Tensor> {
        self.check_inputs(latents, timestep, context)?;
        let [_, f, h, w] = self.grid(latents);
        let shard = SequenceShard::new(comm, f * h * w, self.cfg.num_attention_heads)?;
        let (start, len) = (shard.start(), shard.len());
        let rope = self.rope(f, h, w, latents.device()).rows(start, len);
        // Contiguous, as the fused norm kernels need (a slice of several rows is not; the tch
        // fallback they would take rounds differently from the one-device forward).
        let x = self.patchify(latents).narrow(1, start, len).contiguous();
        let (temb, temb6) = self.time_embedding(timestep);
        let context = self.text_context(context);
        let inputs = BlockInputs { context: &context, temb6: &temb6, rope: &rope, shard: Some(&shard) };
        let x = self.run_blocks(x, &inputs, None)?;
        Ok(self.head_tokens(&x, &temb))
    }

    /// `[B, F, H, W]` of the token grid (after patching) of `latents [B, C, F·pt, H·ph, W·pw]`.
    pub(crate) fn grid(&self, latents: &Tensor) -> [i64; 4] {
        let s = latents.size();
        let [pt, ph, pw] = self.cfg.patch_size;
        [s[0], s[2] / pt, s[3] / ph, s[4] / pw]
    }

    /// Latents → tokens `[B, N, dim]` in the compute dtype.
    pub(crate) fn patchify(&self, latents: &Tensor) -> Tensor {
        let [pt, ph, pw] = self.cfg.patch_size;
        latents
            .to_kind(self.kind)
            .conv3d(&self.patch_weight, Some(&self.patch_bias), [pt, ph, pw], [0, 0, 0], [1, 1, 1], 1)
            .flatten(2, -1)
            .transpose(1, 2)
            .contiguous()
    }

    /// `(temb, temb6)` for `timestep [B]`: `[B, dim]` (compute dtype) and `[B, 6, dim]` (fp32);
    /// for per-frame timesteps `[B, F]`: `[B, F, dim]` and `[B, F, 6, dim]`. The embedding runs in
    /// float32 and is cast to the compute dtype, as in diffusers; `temb6` is cast once here
    /// rather than in each block (they add it to their fp32 tables).
    pub(crate) fn time_embedding(&self, timestep: &Tensor) -> (Tensor, Tensor) {
        self.time_embedding_with(timestep, None)
    }

    /// [`time_embedding`](Self::time_embedding) with `extra` (e.g. an action embedding,
    /// `[B, F, dim]` per frame) added to `temb` before the modulation is projected from it;
    /// a `[B]` timestep then broadcasts over the frames.
    pub(crate) fn time_embedding_with(&self, timestep: &Tensor, extra: Option<&Tensor>) -> (Tensor, Tensor) {
        let lead = timestep.size();
        let flat = timestep.reshape([-1]);
        let temb = self.time_2.forward(&self.time_1.forward(&self.timestep_features(&flat)).silu()).to_kind(self.kind);
        let dim = self.cfg.inner_dim();
        let temb = temb.view([lead.as_slice(), &[dim]].concat().as_slice());
        let temb = match extra {
            // One value for every frame: stays per sample (the fused kernels' layout).
            Some(e) if temb.dim() == 2 && e.dim() == 3 && e.size()[1] == 1 => {
                temb + e.squeeze_dim(1).to_kind(self.kind)
            }
            Some(e) if temb.dim() == 2 && e.dim() == 3 => temb.unsqueeze(1) + e.to_kind(self.kind),
            Some(e) => temb + e.to_kind(self.kind),
            None => temb,
        };
        let mut shape = temb.size();
        shape.insert(shape.len() - 1, 6);
        let temb6 = self.time_proj.forward(&temb.silu()).to_kind(Kind::Float).view(shape.as_slice());
        (temb, temb6)
    }

    /// The text embedder: `[B, L, text_dim]` → `[B, L, dim]`.
    pub(crate) fn text_context(&self, context: &Tensor) -> Tensor {
        self.text_2.forward(&self.text_1.forward_gelu_tanh(&context.to_kind(self.kind)))
    }

    /// Output norm, projection and unpatchify back to `like`'s shape and dtype. `temb` is
    /// `[B, dim]`, or `[B, N, dim]` per token.
    pub(crate) fn head(&self, x: &Tensor, temb: &Tensor, like: &Tensor) -> Tensor {
        self.unpatchify(&self.head_tokens(x, temb), like)
    }

    /// Output norm and projection, per token: `[B, n, dim]` → `[B, n, C·pt·ph·pw]`.
    fn head_tokens(&self, x: &Tensor, temb: &Tensor) -> Tensor {
        let temb = if temb.dim() == 2 { temb.unsqueeze(1) } else { temb.shallow_clone() };
        let m = modulation(&self.scale_shift_table, &temb.unsqueeze(2), 2);
        let spec =
            fastvideo_kernels::LayerNormSpec { eps: self.cfg.eps, affine: None, modulation: Some((&m[1], &m[0])) };
        let x = fastvideo_kernels::layer_norm_modulate(x, &spec);
        self.proj_out.forward(&x)
    }

    /// Output tokens `[B, N, C·pt·ph·pw]` back to `like`'s shape `[B, C, F, H, W]` and dtype.
    pub fn unpatchify(&self, tokens: &Tensor, like: &Tensor) -> Tensor {
        let [b, f, h, w] = self.grid(like);
        let [pt, ph, pw] = self.cfg.patch_size;
        let x = tokens.to_kind(like.kind());
        let x = x.view(&[b, f, h, w, pt, ph, pw, -1][..]).permute([0, 7, 1, 4, 2, 5, 3, 6]);
        x.reshape([b, -1, f * pt, h * ph, w * pw])
    }

    /// The device the weights are on.
    pub fn patch_device(&self) -> Device {
        self.patch_weight.device()
    }

    /// The compute dtype.
    pub fn kind(&self) -> Kind {
        self.kind
    }
}
