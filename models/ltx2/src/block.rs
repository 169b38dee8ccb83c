//! `LTX2VideoTransformerBlock`: a video and an audio stream side by side. Each attends to
//! itself and to its text; then audio-to-video attention (video queries, audio keys) and
//! video-to-audio attention (the reverse) exchange information between the streams; then each
//! has its feed-forward. Every step is modulated by its stream's timestep embedding (adaLN
//! shift/scale/gate), the exchange by its own global and per-block tables.

use anyhow::Result;
use fastvideo_kernels::{gated_residual, residual_rms_norm_modulate, rms_norm_modulate, RmsNormSpec};
use fastvideo_layers::linear::Lora;
use fastvideo_layers::Linear;
use fastvideo_torch::weights::Weights;
use tch::{Kind, Tensor};

use crate::attention::{Attention, AttentionShape, Perturbation};
use crate::config::TransformerConfig;
use crate::embed::{mod_params, mod_params_f32, one_table, FeedForward, RmsNorm};
use crate::rope::Rope;

/// One stream's modules in a block (video or audio).
struct Stream {
    norm1: RmsNorm,
    attn1: Attention,
    norm2: RmsNorm,
    attn2: Attention,
    norm3: RmsNorm,
    ff: FeedForward,
    /// `[6 or 9, dim]`: self-attention and feed-forward shift/scale/gate, then the text
    /// queries' shift/scale/gate where the text attention is modulated.
    table: Tensor,
    /// `[2, dim]`: the text keys' and values' shift and scale (LTX-2.3).
    prompt_table: Option<Tensor>,
    /// `[5, dim]`: a2v scale/shift, v2a scale/shift, then this stream's exchange gate.
    exchange_table: Tensor,
    /// The norm before the exchange.
    exchange_norm: RmsNorm,
    /// Whether the text queries are modulated (`cross_attn_adaln`).
    text_adaln: bool,
}

/// One block.
pub struct Block {
    video: Stream,
    audio: Stream,
    /// Video queries, audio keys and values.
    audio_to_video: Attention,
    /// Audio queries, video keys and values.
    video_to_audio: Attention,
    perturbed: bool,
}

/// A stream's per-forward inputs to every block.
pub struct StreamInputs<'a> {
    /// Its text, projected to the stream's width `[B, L, dim]`.
    pub text: &'a Tensor,
    /// Additive key bias `[B, 1, L]` of the text's padding.
    pub text_bias: Option<&'a Tensor>,
    /// Its timestep modulation `[B, T, n·dim]`.
    pub temb: &'a Tensor,
    /// Its text modulation from the sigma `[B, 1, 2·dim]` (LTX-2.3).
    pub temb_prompt: Option<&'a Tensor>,
    /// Its exchange scale/shift `[B, T, 4·dim]` and gate `[B, T, dim]` modulation.
    pub exchange: (&'a Tensor, &'a Tensor),
    /// Self-attention rotary table.
    pub rope: &'a Rope,
    /// Exchange rotary table (time only).
    pub exchange_rope: &'a Rope,
}

/// Options of one block call.
#[derive(Clone, Copy, Default)]
pub struct BlockOptions<'a> {
    /// Audio-video exchange off (`isolate_modalities`: modality guidance's pass).
    pub isolate: bool,
    /// `[B, 1, 1]`: 1 where a sample's streams exchange, 0 where they are isolated (several
    /// guidance passes in one batch); every sample exchanges when absent.
    pub exchange: Option<&'a Tensor>,
    /// Spatio-temporal guidance on this block's self-attentions.
    pub perturb: Option<Perturbation<'a>>,
    /// Unmerged LoRA deltas on every linear.
    pub lora: Lora<'a>,
}

impl Stream {
    fn new(w: &Weights, c: &TransformerConfig, audio: bool) -> Result<Self> {
        let (p, dim, heads, head_dim, text_dim) = match audio {
            false => ("", c.inner_dim(), c.num_attention_heads, c.attention_head_dim, c.cross_attention_dim),
            true => (
                "audio_",
                c.audio_inner_dim(),
                c.audio_num_attention_heads,
                c.audio_attention_head_dim,
                c.audio_cross_attention_dim,
            ),
        };
        let (gated, text_adaln, ff_bias) = match audio {
            false => (c.gated_attn, c.cross_attn_mod, c.ff_bias),
            true => (c.audio_gated_attn, c.audio_cross_attn_mod, c.audio_ff_bias),
        };
        let shape = |kv_dim| AttentionShape {
            query_dim: dim,
            kv_dim,
            heads,
            head_dim,
            bias: c.attention_bias,
            out_bias: c.attention_out_bias,
            gated,
        };
        let norm = |name: &str| RmsNorm::new(&w.pp(name), dim, c.norm_eps, c.norm_elementwise_affine);
        let table_rows = if text_adaln { 9 } else { 6 };
        Ok(Self {
            norm1: norm(&format!("{p}norm1"))?,
            attn1: Attention::new(&w.pp(format!("{p}attn1")), &shape(dim))?,
            norm2: norm(&format!("{p}norm2"))?,
            attn2: Attention::new(&w.pp(format!("{p}attn2")), &shape(text_dim))?,
            norm3: norm(&format!("{p}norm3"))?,
            ff: FeedForward::new(&w.pp(format!("{p}ff")), dim, ff_bias)?,
            table: w.get(&format!("{p}scale_shift_table"), &[table_rows, dim])?,
            prompt_table: c
                .prompt_modulation()
                .then(|| w.get(&format!("{p}prompt_scale_shift_table"), &[2, dim]))
                .transpose()?,
            exchange_table: w.get(
                &format!("{}_a2v_cross_attn_scale_shift_table", if audio { "audio" } else { "video" }),
                &[5, dim],
            )?,
            exchange_norm: norm(if audio { "video_to_audio_norm" } else { "audio_to_video_norm" })?,
            text_adaln,
        })
    }

    /// Self-attention, then the text attention. The text attention's residual add is left to
    /// the caller, which fuses it into the norm that follows.
    fn attend(&self, x: &Tensor, s: &StreamInputs, perturb: Option<Perturbation>, lora: Lora) -> Attended {
        let m = mod_params_f32(&self.table, s.temb);
        let h = norm_mod(&self.norm1, x, Some((&m[1], &m[0])));
        let a = self.attn1.forward(&h, None, None, Some(s.rope), None, perturb, lora);
        drop(h);
        let text_mod = self.text_adaln.then(|| (&m[7], &m[6]));
        let (x, h) = residual_norm_mod(&self.norm2, x, &a, Some(&m[2]), text_mod);
        drop(a);
        let text = match &self.prompt_table {
            Some(table) => {
                let kv = match s.temb_prompt {
                    Some(t) => mod_params(table, t),
                    None => table.to_kind(x.kind()).unsqueeze(0).unsqueeze(0).unbind(2),
                };
                s.text * (&kv[1] + 1.0) + &kv[0]
            }
            None => s.text.shallow_clone(),
        };
        let text = self.attn2.forward(&h, Some(&text), s.text_bias, None, None, None, lora);
        let text_gate = self.text_adaln.then(|| m[8].shallow_clone());
        Attended { x, text, text_gate, m }
    }

    /// `x + y · gate`, then the feed-forward modulated by `m` (from [`attend`](Self::attend)).
    fn feed_forward(&self, x: &Tensor, y: &Tensor, gate: Option<&Tensor>, m: &[Tensor], lora: Lora) -> Tensor {
        let (x, h) = residual_norm_mod(&self.norm3, x, y, gate, Some((&m[4], &m[3])));
        let ff = self.ff.forward(&h, lora);
        drop(h);
        gated_residual(&x, &ff, Some(&m[5]))
    }

    /// The exchange's modulation (float32): (a2v scale, a2v shift, v2a scale, v2a shift) and the
    /// gate.
    fn exchange_mod(&self, s: &StreamInputs) -> (Vec<Tensor>, Tensor) {
        let ss = mod_params_f32(&self.exchange_table.narrow(0, 0, 4), s.exchange.0);
        let gate = mod_params_f32(&self.exchange_table.narrow(0, 4, 1), s.exchange.1).remove(0);
        (ss, gate)
    }
}

/// A stream after [`Stream::attend`]: its residual after the self-attention, the text
/// attention's output and gate (not yet added), and the block's modulation (float32).
struct Attended {
    x: Tensor,
    text: Tensor,
    text_gate: Option<Tensor>,
    m: Vec<Tensor>,
}

/// `norm(x) · (1 + scale) + shift` in float32, rounded once (one fused pass on CUDA for the
/// weightless norms every published config has).
fn norm_mod(norm: &RmsNorm, x: &Tensor, modulation: Option<(&Tensor, &Tensor)>) -> Tensor {
    match norm.weight() {
        None => rms_norm_modulate(x, &RmsNormSpec { eps: norm.eps(), modulation }),
        Some(_) => {
            let h = norm.forward(x);
            match modulation {
                Some((scale, shift)) => (h.to_kind(Kind::Float) * (scale + 1.0) + shift).to_kind(x.kind()),
                None => h,
            }
        }
    }
}

/// `x' = x + y · gate`, then [`norm_mod`] of `x'` as stored; returns both.
fn residual_norm_mod(
    norm: &RmsNorm,
    x: &Tensor,
    y: &Tensor,
    gate: Option<&Tensor>,
    modulation: Option<(&Tensor, &Tensor)>,
) -> (Tensor, Tensor) {
    if norm.weight().is_some() {
        let x = gated_residual(x, y, gate);
        let h = norm_mod(norm, &x, modulation);
        return (x, h);
    }
    // The kernel reads the gate and the modulation with one stride: rows of one table. Vectors
    // already laid out alike (chunks of one table) are read where they are.
    let alike = |a: &Tensor, b: &Tensor| a.size() == b.size() && a.stride() == b.stride() && a.kind() == b.kind();
    let joined = match (gate, modulation) {
        (Some(g), Some((scale, shift))) if !(alike(g, scale) && alike(g, shift)) => one_table(&[g, scale, shift]),
        _ => Vec::new(),
    };
    let (gate, modulation) = match joined.as_slice() {
        [g, scale, shift] => (Some(g), Some((scale, shift))),
        _ => (gate, modulation),
    };
    residual_rms_norm_modulate(x, y, gate, &RmsNormSpec { eps: norm.eps(), modulation })
}

impl Block {
    /// Block `w` (`transformer_blocks.i`).
    pub fn new(w: &Weights, c: &TransformerConfig) -> Result<Self> {
        let (dim, adim) = (c.inner_dim(), c.audio_inner_dim());
        let exchange = |q: i64, kv: i64, gated: bool| AttentionShape {
            query_dim: q,
            kv_dim: kv,
            heads: c.audio_num_attention_heads,
            head_dim: c.audio_attention_head_dim,
            bias: c.attention_bias,
            out_bias: c.attention_out_bias,
            gated,
        };
        Ok(Self {
            video: Stream::new(w, c, false)?,
            audio: Stream::new(w, c, true)?,
            audio_to_video: Attention::new(&w.pp("audio_to_video_attn"), &exchange(dim, adim, c.gated_attn))?,
            video_to_audio: Attention::new(&w.pp("video_to_audio_attn"), &exchange(adim, dim, c.audio_gated_attn))?,
            perturbed: c.perturbed_attn,
        })
    }

    /// `(video [B, N, dim], audio [B, Na, adim])` through the block.
    pub fn forward(
        &self,
        video: &Tensor,
        audio: &Tensor,
        v: &StreamInputs,
        a: &StreamInputs,
        o: BlockOptions,
    ) -> (Tensor, Tensor) {
        // Spatio-temporal guidance exists only where the layout has perturbed attention.
        let perturb = if self.perturbed { o.perturb } else { None };
        let lora = o.lora;
        let va = self.video.attend(video, v, perturb, lora);
        let aa = self.audio.attend(audio, a, perturb, lora);
        if o.isolate {
            return (
                self.video.feed_forward(&va.x, &va.text, va.text_gate.as_ref(), &va.m, lora),
                self.audio.feed_forward(&aa.x, &aa.text, aa.text_gate.as_ref(), &aa.m, lora),
            );
        }
        let (vss, v_gate) = self.video.exchange_mod(v);
        let (ass, a_gate) = self.audio.exchange_mod(a);
        // Each stream's text residual fused with its exchange norm: the a2v queries (video) and
        // keys (audio); then the v2a keys and queries from the same residuals.
        let (video, q) = residual_norm_mod(
            &self.video.exchange_norm,
            &va.x,
            &va.text,
            va.text_gate.as_ref(),
            Some((&vss[0], &vss[1])),
        );
        let (audio, kv) = residual_norm_mod(
            &self.audio.exchange_norm,
            &aa.x,
            &aa.text,
            aa.text_gate.as_ref(),
            Some((&ass[0], &ass[1])),
        );
        let a2v =
            self.audio_to_video.forward(&q, Some(&kv), None, Some(v.exchange_rope), Some(a.exchange_rope), None, lora);
        drop((q, kv));
        let kv = norm_mod(&self.video.exchange_norm, &video, Some((&vss[2], &vss[3])));
        let q = norm_mod(&self.audio.exchange_norm, &audio, Some((&ass[2], &ass[3])));
        let v2a =
            self.video_to_audio.forward(&q, Some(&kv), None, Some(a.exchange_rope), Some(v.exchange_rope), None, lora);
        drop((q, kv));
        // The exchange's residuals fused into the feed-forwards' norms; `keep` zeroes the
        // exchange of samples whose streams are isolated (several guidance passes in one batch).
        let gate = |g: Tensor| match o.exchange {
            Some(keep) => g * keep.to_kind(Kind::Float),
            None => g,
        };
        (
            self.video.feed_forward(&video, &a2v, Some(&gate(v_gate)), &va.m, lora),
            self.audio.feed_forward(&audio, &v2a, Some(&gate(a_gate)), &aa.m, lora),
        )
    }

    /// Its linears.
    pub fn linears<'a>(&'a self, out: &mut Vec<&'a Linear>) {
        for s in [&self.video, &self.audio] {
            s.attn1.linears(out);
            s.attn2.linears(out);
            s.ff.linears(out);
        }
        self.audio_to_video.linears(out);
        self.video_to_audio.linears(out);
    }
}
