//! `LTX2TextConnectors`: the text encoder's stacked hidden states (every layer of Gemma 3) made
//! into each stream's text. LTX-2.0 normalises each layer by its masked mean and range and
//! projects once for both streams; LTX-2.3 normalises each token and projects per stream. Each
//! stream then has a small 1-D transformer: padding replaced by learnable registers (the real
//! tokens moved to the front), rotary positions over the sequence, attention and feed-forward.

use std::path::Path;

use anyhow::{ensure, Context, Result};
use fastvideo_layers::config::{read_config_with, unsupported};
use fastvideo_layers::Linear;
use fastvideo_torch::weights::Weights;
use serde::Deserialize;
use tch::{Device, Kind, Tensor};

use crate::attention::{Attention, AttentionShape};
use crate::config::RopeType;
use crate::embed::{FeedForward, RmsNorm};
use crate::rope::RopeSpec;

/// `connectors/config.json`; field names are diffusers'.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct ConnectorsConfig {
    #[serde(default = "d::caption")]
    pub caption_channels: i64,
    #[serde(default = "d::factor")]
    pub text_proj_in_factor: i64,
    #[serde(default = "d::heads")]
    pub video_connector_num_attention_heads: i64,
    #[serde(default = "d::head_dim")]
    pub video_connector_attention_head_dim: i64,
    #[serde(default = "d::layers")]
    pub video_connector_num_layers: usize,
    #[serde(default = "d::registers")]
    pub video_connector_num_learnable_registers: Option<i64>,
    #[serde(default)]
    pub video_gated_attn: bool,
    #[serde(default = "d::heads")]
    pub audio_connector_num_attention_heads: i64,
    #[serde(default = "d::head_dim")]
    pub audio_connector_attention_head_dim: i64,
    #[serde(default = "d::layers")]
    pub audio_connector_num_layers: usize,
    #[serde(default = "d::registers")]
    pub audio_connector_num_learnable_registers: Option<i64>,
    #[serde(default)]
    pub audio_gated_attn: bool,
    #[serde(default = "d::base")]
    pub connector_rope_base_seq_len: i64,
    #[serde(default = "d::theta")]
    pub rope_theta: f64,
    #[serde(default = "d::yes")]
    pub rope_double_precision: bool,
    #[serde(default)]
    pub causal_temporal_positioning: bool,
    #[serde(default = "d::interleaved")]
    pub rope_type: RopeType,
    #[serde(default)]
    pub per_modality_projections: bool,
    #[serde(default = "d::video_hidden")]
    pub video_hidden_dim: i64,
    #[serde(default = "d::audio_hidden")]
    pub audio_hidden_dim: i64,
    #[serde(default)]
    pub proj_bias: bool,
}

mod d {
    pub fn caption() -> i64 {
        3840
    }
    pub fn factor() -> i64 {
        49
    }
    pub fn heads() -> i64 {
        30
    }
    pub fn head_dim() -> i64 {
        128
    }
    pub fn layers() -> usize {
        2
    }
    pub fn registers() -> Option<i64> {
        Some(128)
    }
    pub fn base() -> i64 {
        4096
    }
    pub fn theta() -> f64 {
        10000.0
    }
    pub fn yes() -> bool {
        true
    }
    pub fn interleaved() -> crate::config::RopeType {
        crate::config::RopeType::Interleaved
    }
    pub fn video_hidden() -> i64 {
        4096
    }
    pub fn audio_hidden() -> i64 {
        2048
    }
}

/// One block of a connector: self-attention and feed-forward, pre-norm, no modulation.
struct Block1d {
    norm1: RmsNorm,
    attn1: Attention,
    norm2: RmsNorm,
    ff: FeedForward,
}

/// One stream's connector (`LTX2ConnectorTransformer1d`).
struct Connector {
    registers: Option<Tensor>,
    blocks: Vec<Block1d>,
    norm_out: RmsNorm,
    rope: RopeSpec,
}

impl Connector {
    /// The video stream's connector (`video_connector`), or the audio stream's.
    fn new(w: &Weights, c: &ConnectorsConfig, audio: bool) -> Result<Self> {
        let (w, heads, head_dim, layers, registers, gated) = match audio {
            false => (
                w.pp("video_connector"),
                c.video_connector_num_attention_heads,
                c.video_connector_attention_head_dim,
                c.video_connector_num_layers,
                c.video_connector_num_learnable_registers,
                c.video_gated_attn,
            ),
            true => (
                w.pp("audio_connector"),
                c.audio_connector_num_attention_heads,
                c.audio_connector_attention_head_dim,
                c.audio_connector_num_layers,
                c.audio_connector_num_learnable_registers,
                c.audio_gated_attn,
            ),
        };
        let w = &w;
        let dim = heads * head_dim;
        let shape = AttentionShape { query_dim: dim, kv_dim: dim, heads, head_dim, bias: true, out_bias: true, gated };
        let blocks = (0..layers)
            .map(|i| {
                let b = w.pp("transformer_blocks").pp(i);
                Ok(Block1d {
                    norm1: RmsNorm::new(&b.pp("norm1"), dim, 1e-6, false)?,
                    attn1: Attention::new(&b.pp("attn1"), &shape)?,
                    norm2: RmsNorm::new(&b.pp("norm2"), dim, 1e-6, false)?,
                    ff: FeedForward::new(&b.pp("ff"), dim, true)?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            registers: registers.map(|r| w.get("learnable_registers", &[r, dim])).transpose()?,
            blocks,
            norm_out: RmsNorm::new(&w.pp("norm_out"), dim, 1e-6, false)?,
            rope: RopeSpec {
                dim,
                max_positions: vec![c.connector_rope_base_seq_len as f64],
                theta: c.rope_theta,
                double_precision: c.rope_double_precision,
                rope_type: c.rope_type,
                heads,
            },
        })
    }

    /// `x [B, L, dim]` with the additive key bias `bias [B, L]` (0 or −max) → (the stream's
    /// text, the bias its keys had: zeros once registers fill the padding).
    fn forward(&self, x: &Tensor, bias: &Tensor) -> Result<(Tensor, Tensor)> {
        let (b, l) = (x.size()[0], x.size()[1]);
        let (x, bias) = match &self.registers {
            Some(reg) => {
                let r = reg.size()[0];
                ensure!(
                    l % r == 0,
                    "ltx2 connectors: {l} text tokens are not a multiple of the {r} learnable registers"
                );
                let registers = reg.repeat([l / r, 1]).to_kind(x.kind()); // [L, dim]
                let keep = bias.ge(-9000.0).to_kind(Kind::Int64); // [B, L]
                                                                  // Real tokens to the front in their order (a stable sort of the inverted mask);
                                                                  // registers, by absolute position, behind them.
                let (_, order) = (keep.ones_like() - &keep).sort_stable(true, 1, false);
                let front = x.gather(1, &order.unsqueeze(-1).expand([b, l, x.size()[2]], false), false);
                let valid = keep.sum_dim_intlist(1, true, Kind::Int64);
                let in_front =
                    Tensor::arange(l, (Kind::Int64, x.device())).unsqueeze(0).lt_tensor(&valid).unsqueeze(-1);
                (front.where_self(&in_front, &registers.unsqueeze(0)), bias.zeros_like())
            }
            None => (x.shallow_clone(), bias.shallow_clone()),
        };
        let positions = Tensor::arange(l, (Kind::Float, x.device())).view([1, 1, l]);
        let rope = self.rope.table(&positions);
        let key_bias = bias.unsqueeze(1);
        let mut x = x;
        for blk in &self.blocks {
            let h = blk.attn1.forward(&blk.norm1.forward(&x), None, Some(&key_bias), Some(&rope), None, None, None);
            // Not in place: `x` may be the caller's tensor.
            let y = &x + h;
            x = &y + blk.ff.forward(&blk.norm2.forward(&y), None);
        }
        Ok((self.norm_out.forward(&x), bias))
    }
}

/// The text connectors of an LTX-2 folder.
pub struct Ltx2Connectors {
    /// Its config.
    pub cfg: ConnectorsConfig,
    /// LTX-2.0: one projection for both streams; LTX-2.3: one per stream.
    proj_in: (Linear, Option<Linear>),
    video: Connector,
    audio: Connector,
}

/// What the connectors give the transformer.
pub struct ConnectedText {
    /// The video stream's text `[B, L, video width]`.
    pub video: Tensor,
    /// The audio stream's text `[B, L, audio width]`.
    pub audio: Tensor,
    /// `[B, L]`: the mask the transformer's text attention takes.
    pub mask: Tensor,
}

impl Ltx2Connectors {
    /// Reads `dir` (`config.json` and the weights) onto `device` in `kind`.
    pub fn load(dir: &Path, device: Device, kind: Kind) -> Result<Self> {
        let path = dir.join("config.json");
        let cfg: ConnectorsConfig = read_config_with(&path, &[])?;
        if cfg.causal_temporal_positioning {
            return Err(unsupported(&path, "causal_temporal_positioning", true, "false"));
        }
        let w = Weights::from_dir(dir, "diffusion_pytorch_model", device, kind)?;
        let c = Self::new(cfg, &w).with_context(|| format!("{}", dir.display()))?;
        w.warn_unused("connectors");
        Ok(c)
    }

    /// Builds them from `w`.
    pub fn new(cfg: ConnectorsConfig, w: &Weights) -> Result<Self> {
        let c = &cfg;
        let input = c.caption_channels * c.text_proj_in_factor;
        let proj_in = match c.per_modality_projections {
            true => (
                Linear::new(&w.pp("video_text_proj_in"), input, c.video_hidden_dim, c.proj_bias)?,
                Some(Linear::new(&w.pp("audio_text_proj_in"), input, c.audio_hidden_dim, c.proj_bias)?),
            ),
            false => (Linear::new(&w.pp("text_proj_in"), input, c.caption_channels, c.proj_bias)?, None),
        };
        let (video, audio) = (Connector::new(w, c, false)?, Connector::new(w, c, true)?);
        Ok(Self { cfg, proj_in, video, audio })
    }

    /// `states [B, L, caption_channels, layers]` (or the last two flattened) with `mask [B, L]`
    /// (1 token, 0 padding; prompts padded on the left) → each stream's text.
    pub fn forward(&self, states: &Tensor, mask: &Tensor) -> Result<ConnectedText> {
        let c = &self.cfg;
        let s = states.size();
        let states = match s.len() {
            3 => states.unflatten(2, [c.caption_channels, -1]),
            _ => states.shallow_clone(),
        };
        let s = states.size();
        ensure!(
            s.len() == 4 && s[2] == c.caption_channels && s[3] == c.text_proj_in_factor && mask.size() == s[..2],
            "ltx2 connectors: text states {s:?} and mask {:?}; expected [B, L, {}, {}] and [B, L]",
            mask.size(),
            c.caption_channels,
            c.text_proj_in_factor
        );
        let (video_in, audio_in) = match &self.proj_in {
            (video, Some(audio)) => {
                let xf = &states;
                let normed = xf * (xf.square().mean_dim(2, true, xf.kind()) + 1e-6).rsqrt();
                let normed = normed.flatten(2, 3);
                let keep = mask.to_kind(Kind::Bool).unsqueeze(-1);
                let normed = normed.where_self(&keep, &normed.zeros_like());
                let vs = (c.video_hidden_dim as f64 / c.caption_channels as f64).sqrt();
                let as_ = (c.audio_hidden_dim as f64 / c.caption_channels as f64).sqrt();
                (video.forward(&(&normed * vs)), audio.forward(&(&normed * as_)))
            }
            (shared, None) => {
                let p = shared.forward(&masked_mean_norm(&states, mask, 8.0));
                (p.shallow_clone(), p)
            }
        };
        let kind = video_in.kind();
        let max = match kind {
            Kind::BFloat16 => 3.389_531_389_251_535_5e38,
            Kind::Half => 65504.0,
            _ => f32::MAX as f64,
        };
        let bias = (mask.to_kind(Kind::Int64) - 1).to_kind(kind) * max;
        let (video, video_bias) = self.video.forward(&video_in, &bias)?;
        // The reference's mask back from the video connector: bias below 1e-6, i.e. every key.
        let keep = video_bias.lt(1e-6).to_kind(Kind::Int64);
        let video = video * keep.unsqueeze(-1).to_kind(kind);
        let (audio, _) = self.audio.forward(&audio_in, &bias)?;
        Ok(ConnectedText { video, audio, mask: keep })
    }
}

/// LTX-2.0's per-layer normalisation: each layer of each prompt minus its mean over the real
/// tokens, divided by its range there, times `scale`; padding zero; layers flattened into the
/// channels `[B, L, C·layers]`.
fn masked_mean_norm(x: &Tensor, mask: &Tensor, scale: f64) -> Tensor {
    let s = x.size();
    let (b, l, d) = (s[0], s[1], s[2]);
    let lengths = mask.sum_dim_intlist(-1, false, Kind::Int64); // [B]
    let idx = Tensor::arange(l, (Kind::Int64, x.device())).unsqueeze(0);
    let keep = idx.ge_tensor(&(lengths.unsqueeze(1) * -1 + l)).view([b, l, 1, 1]); // left padding
    let drop = keep.logical_not();
    let zeroed = x.masked_fill(&drop, 0.0);
    let count = (lengths * d).view([b, 1, 1, 1]);
    let mean = zeroed.sum_dim_intlist(&[1i64, 2][..], true, x.kind()) / (count + 1e-6);
    let min = x.masked_fill(&drop, f64::INFINITY).amin(&[1i64, 2][..], true);
    let max = x.masked_fill(&drop, f64::NEG_INFINITY).amax(&[1i64, 2][..], true);
    // The count is float32, so the arithmetic runs in float32 (as the reference's does) and
    // the result is cast back to the states' dtype.
    let normed = ((x - mean) / (max - min + 1e-6) * scale).flatten(2, 3);
    normed.masked_fill(&drop.view([b, l, 1]), 0.0).to_kind(x.kind())
}
