//! `LTX2VideoTransformer3DModel`: video tokens `[B, N, 128]` and audio tokens `[B, Na, 128]` in,
//! one velocity per stream out, from one forward over both.

use std::path::Path;

use anyhow::{ensure, Context, Result};
use fastvideo_layers::adapters::{LinearAdapters, LinearModel};
use fastvideo_layers::linear::Lora;
use fastvideo_layers::Linear;
use fastvideo_lora::KeyMap;
use fastvideo_pipeline::{AdapterRows, AdapterSet};
use fastvideo_torch::weights::Weights;
use tch::{Device, Kind, Tensor};

use crate::attention::{key_bias, Perturbation};
use crate::block::{Block, BlockOptions, StreamInputs};
use crate::config::TransformerConfig;
use crate::embed::{layer_norm, AdaLayerNormSingle, TextProjection};
use crate::lora_keys::Ltx2Keys;
use crate::rope::{audio_positions, video_positions, RopeSpec};

/// One stream's modules outside the blocks.
struct StreamEnds {
    proj_in: Linear,
    /// LTX-2.0: the text projected to the stream's width (2.3's connectors do it instead).
    caption_projection: Option<TextProjection>,
    time_embed: AdaLayerNormSingle,
    /// The exchange's global scale/shift (4 vectors) and gate (1) from a timestep.
    exchange_scale_shift: AdaLayerNormSingle,
    exchange_gate: AdaLayerNormSingle,
    /// The text's modulation from the sigma (LTX-2.3 with `use_prompt_adaln_single`).
    prompt_adaln: Option<AdaLayerNormSingle>,
    scale_shift_table: Tensor,
    proj_out: Linear,
}

impl StreamEnds {
    fn new(w: &Weights, c: &TransformerConfig, audio: bool) -> Result<Self> {
        let (p, dim, input, output, text_mod) = match audio {
            false => ("", c.inner_dim(), c.in_channels, c.out_channels(), c.cross_attn_mod),
            true => {
                ("audio_", c.audio_inner_dim(), c.audio_in_channels, c.audio_out_channels(), c.audio_cross_attn_mod)
            }
        };
        let (gate, scale_shift) = match audio {
            false => ("av_cross_attn_video_a2v_gate", "av_cross_attn_video_scale_shift"),
            true => ("av_cross_attn_audio_v2a_gate", "av_cross_attn_audio_scale_shift"),
        };
        Ok(Self {
            proj_in: Linear::new(&w.pp(format!("{p}proj_in")), input, dim, true)?,
            caption_projection: c
                .use_prompt_embeddings
                .then(|| TextProjection::new(&w.pp(format!("{p}caption_projection")), c.caption_channels, dim))
                .transpose()?,
            time_embed: AdaLayerNormSingle::new(&w.pp(format!("{p}time_embed")), dim, if text_mod { 9 } else { 6 })?,
            exchange_scale_shift: AdaLayerNormSingle::new(&w.pp(scale_shift), dim, 4)?,
            exchange_gate: AdaLayerNormSingle::new(&w.pp(gate), dim, 1)?,
            prompt_adaln: (c.prompt_modulation() && c.use_prompt_adaln_single)
                .then(|| AdaLayerNormSingle::new(&w.pp(format!("{p}prompt_adaln")), dim, 2))
                .transpose()?,
            scale_shift_table: w.get(&format!("{p}scale_shift_table"), &[2, dim])?,
            proj_out: Linear::new(&w.pp(format!("{p}proj_out")), dim, output, true)?,
        })
    }

    /// The output head: LayerNorm, shift/scale from the embedded timestep, projection.
    fn head(&self, x: &Tensor, embedded: &Tensor, lora: Lora) -> Tensor {
        let ss = self.scale_shift_table.unsqueeze(0).unsqueeze(0) + embedded.unsqueeze(2);
        let (shift, scale) = (ss.select(2, 0), ss.select(2, 1));
        self.proj_out.forward_lora(&(layer_norm(x) * (scale + 1.0) + shift), lora)
    }
}

/// The LTX-2 audio-video transformer.
pub struct Ltx2Transformer {
    /// Its config.
    pub cfg: TransformerConfig,
    video: StreamEnds,
    audio: StreamEnds,
    blocks: Vec<Block>,
    rope: RopeSpec,
    audio_rope: RopeSpec,
    exchange_rope: RopeSpec,
    exchange_audio_rope: RopeSpec,
    kind: Kind,
    /// Its linear modules as LoRA adapters see them, and the set merged into the weights, if any.
    adapters: LinearAdapters,
}

// SAFETY: the weights are read-only after construction, except while an adapter set is merged
// or unmerged, which the engine does between forwards; libtorch kernels may read one tensor from
// several threads; every request's state lives in its own tensors.
unsafe impl Sync for Ltx2Transformer {}

/// One forward's inputs, as `LTX2VideoTransformer3DModel.forward` takes them.
pub struct Ltx2Inputs<'a> {
    /// Video tokens `[B, N, in_channels]` of a `grid` of latent cells.
    pub video: &'a Tensor,
    /// Audio tokens `[B, Na, audio_in_channels]`.
    pub audio: &'a Tensor,
    /// The text for the video stream `[B, L, caption_channels]` (or the stream's width without
    /// caption projections).
    pub text: &'a Tensor,
    /// The text for the audio stream.
    pub audio_text: &'a Tensor,
    /// `[B, L]`, 1 for tokens and 0 for padding.
    pub text_mask: Option<&'a Tensor>,
    /// The same for the audio text.
    pub audio_text_mask: Option<&'a Tensor>,
    /// The video timestep, scaled to 0..1000: `[B]`, or `[B, N]` one per token.
    pub timestep: &'a Tensor,
    /// The audio timestep (`timestep` when absent).
    pub audio_timestep: Option<&'a Tensor>,
    /// The video sigma `[B]` (LTX-2.3's prompt modulation; the cross timestep).
    pub sigma: Option<&'a Tensor>,
    /// The audio sigma (`sigma` when absent).
    pub audio_sigma: Option<&'a Tensor>,
    /// Latent frames, rows and columns of the video tokens.
    pub grid: [i64; 3],
    /// The clip's frame rate (video positions are in seconds).
    pub fps: f64,
    /// Audio tokens' latent frames.
    pub audio_frames: i64,
    /// Turn the audio-video exchange off in every block (modality guidance's pass).
    pub isolate_modalities: bool,
    /// `[B]`: 1 where a sample's streams exchange, 0 where they are isolated — modality
    /// guidance's pass batched with the others (diffusers has only the whole-batch flag).
    pub exchange_mask: Option<&'a Tensor>,
    /// Blocks whose self-attention spatio-temporal guidance perturbs.
    pub stg_blocks: &'a [usize],
    /// `[B]`: 1 where a sample attends in those blocks, 0 where it is perturbed (all perturbed
    /// when absent).
    pub perturbation_mask: Option<&'a Tensor>,
    /// Modulate each stream's exchange by the other stream's sigma (LTX-2.3) instead of its own
    /// timestep (LTX-2.0).
    pub use_cross_timestep: bool,
    /// Unmerged LoRA deltas on every linear ([`Ltx2Transformer::unmerged`]); `None` runs the
    /// weights as they are (a merged set included).
    pub lora: Lora<'a>,
}

impl Ltx2Transformer {
    /// Reads `dir` (`config.json` and the weights) onto `device` in `kind`.
    pub fn load(dir: &Path, device: Device, kind: Kind) -> Result<Self> {
        let cfg = TransformerConfig::load(&dir.join("config.json"))?;
        let w = Weights::from_dir(dir, "diffusion_pytorch_model", device, kind)?;
        let t = Self::new(cfg, &w).with_context(|| format!("{}", dir.display()))?;
        w.warn_unused("transformer");
        Ok(t)
    }

    /// Builds it from `w` in `cfg`'s shape.
    pub fn new(cfg: TransformerConfig, w: &Weights) -> Result<Self> {
        let blocks =
            (0..cfg.num_layers).map(|i| Block::new(&w.pp("transformer_blocks").pp(i), &cfg)).collect::<Result<_>>()?;
        let spec = |dim, max: Vec<i64>, heads| RopeSpec {
            dim,
            max_positions: max.into_iter().map(|m| m as f64).collect(),
            theta: cfg.rope_theta,
            double_precision: cfg.rope_double_precision,
            rope_type: cfg.rope_type,
            heads,
        };
        let exchange_max = cfg.pos_embed_max_pos.max(cfg.audio_pos_embed_max_pos);
        let (video, audio) = (StreamEnds::new(w, &cfg, false)?, StreamEnds::new(w, &cfg, true)?);
        Ok(Self {
            video,
            audio,
            blocks,
            rope: spec(
                cfg.inner_dim(),
                vec![cfg.pos_embed_max_pos, cfg.base_height, cfg.base_width],
                cfg.num_attention_heads,
            ),
            audio_rope: spec(cfg.audio_inner_dim(), vec![cfg.audio_pos_embed_max_pos], cfg.audio_num_attention_heads),
            // The exchange rotates at the audio width, by time alone; the video side keeps the
            // video head count for the split layout, as the reference does.
            exchange_rope: spec(cfg.audio_cross_attention_dim, vec![exchange_max], cfg.num_attention_heads),
            exchange_audio_rope: spec(cfg.audio_cross_attention_dim, vec![exchange_max], cfg.audio_num_attention_heads),
            kind: w.kind(),
            adapters: LinearAdapters::new(w.linears()),
            cfg,
        })
    }

    /// What a forward of the request whose adapters are `set` adds unmerged: every row's
    /// deltas, nothing when `set` is the merged one (or empty). Another set merged would
    /// compute on the wrong weights: refused.
    pub fn unmerged<'a>(&self, set: Option<&'a AdapterSet>) -> Result<Option<AdapterRows<'a>>> {
        let set = set.filter(|s| !s.is_empty());
        match (self.adapters.merged(), set) {
            (Some(m), Some(s)) if m == s.key() => Ok(None),
            (Some(m), _) => anyhow::bail!(
                "ltx2 transformer: adapters `{m}` are merged but this request runs {}",
                set.map_or("none".to_string(), |s| format!("`{}`", s.key()))
            ),
            (None, set) => Ok(AdapterRows::every(set)),
        }
    }

    /// The dtype its weights are in (its inputs are cast to it).
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The velocities `(video [B, N, out], audio [B, Na, audio_out])`.
    pub fn forward(&self, x: &Ltx2Inputs) -> Result<(Tensor, Tensor)> {
        self.forward_at(x, None)
    }

    /// [`forward`](Self::forward) with the video tokens' positions given, `[1, 3, N]` midpoints
    /// (seconds, pixels, pixels), in place of the grid's: keyframe conditioning appends tokens
    /// with places of their own.
    pub fn forward_at(&self, x: &Ltx2Inputs, positions: Option<&Tensor>) -> Result<(Tensor, Tensor)> {
        let c = &self.cfg;
        let b = x.video.size()[0];
        let [f, h, w] = x.grid;
        let n = positions.map_or(f * h * w, |p| p.size()[2]);
        ensure!(
            x.video.size() == [b, n, c.in_channels],
            "ltx2 transformer: video tokens {:?}, expected [{b}, {n}, {}] for the grid {:?}",
            x.video.size(),
            c.in_channels,
            x.grid
        );
        ensure!(
            x.audio.size() == [b, x.audio_frames, c.audio_in_channels],
            "ltx2 transformer: audio tokens {:?}, expected [{b}, {}, {}]",
            x.audio.size(),
            x.audio_frames,
            c.audio_in_channels
        );
        let dev = x.video.device();
        let kind = self.kind;
        let audio_t = x.audio_timestep.unwrap_or(x.timestep);
        let audio_sigma = x.audio_sigma.or(x.sigma);

        // Rotary tables from the tokens' places in seconds and pixels.
        let vpos = match positions {
            Some(p) => p.to_device(dev),
            None => video_positions(x.grid, c.vae_scale_factors, c.causal_offset, x.fps, dev),
        };
        let apos = audio_positions(
            x.audio_frames,
            c.audio_scale_factor,
            c.causal_offset,
            c.audio_hop_length,
            c.audio_sampling_rate,
            dev,
        );
        let (vrope, arope) = (self.rope.table(&vpos), self.audio_rope.table(&apos));
        let (vx_rope, ax_rope) =
            (self.exchange_rope.table(&vpos.narrow(1, 0, 1)), self.exchange_audio_rope.table(&apos));

        let lora = x.lora;
        let video = self.video.proj_in.forward_lora(&x.video.to_kind(kind), lora);
        let audio = self.audio.proj_in.forward_lora(&x.audio.to_kind(kind), lora);

        let rows = |t: Tensor| t.view([b, -1, *t.size().last().unwrap()]);
        let (temb, vemb) = self.video.time_embed.forward(x.timestep, kind, lora);
        let (atemb, aemb) = self.audio.time_embed.forward(audio_t, kind, lora);
        let (temb, vemb, atemb, aemb) = (rows(temb), rows(vemb), rows(atemb), rows(aemb));
        let prompt = |ends: &StreamEnds, s: Option<&Tensor>| -> Result<Option<Tensor>> {
            match &ends.prompt_adaln {
                Some(m) => Ok(Some(rows(m.forward(sigma_or(s, "prompt modulation")?, kind, lora).0))),
                None => Ok(None),
            }
        };
        let (vprompt, aprompt) = (prompt(&self.video, x.sigma)?, prompt(&self.audio, audio_sigma)?);
        let gate_factor = c.cross_attn_timestep_scale_multiplier as f64 / c.timestep_scale_multiplier as f64;
        let (v_ex_t, a_ex_t) = match x.use_cross_timestep {
            true => (sigma_or(audio_sigma, "use_cross_timestep")?, sigma_or(x.sigma, "use_cross_timestep")?),
            false => (x.timestep, audio_t),
        };
        let exchange = |ends: &StreamEnds, t: &Tensor| {
            let ss = rows(ends.exchange_scale_shift.forward(t, kind, lora).0);
            let gate = rows(ends.exchange_gate.forward(&(t.to_kind(Kind::Float) * gate_factor), kind, lora).0);
            (ss, gate)
        };
        let (v_ex, a_ex) = (exchange(&self.video, v_ex_t), exchange(&self.audio, a_ex_t));

        let project = |ends: &StreamEnds, t: &Tensor| match &ends.caption_projection {
            Some(p) => p.forward(&t.to_kind(kind), lora),
            None => t.to_kind(kind),
        };
        let (text, audio_text) = (project(&self.video, x.text), project(&self.audio, x.audio_text));
        let vbias = x.text_mask.map(|m| key_bias(m, kind));
        let abias = x.audio_text_mask.map(|m| key_bias(m, kind));
        let v_in = StreamInputs {
            text: &text,
            text_bias: vbias.as_ref(),
            temb: &temb,
            temb_prompt: vprompt.as_ref(),
            exchange: (&v_ex.0, &v_ex.1),
            rope: &vrope,
            exchange_rope: &vx_rope,
        };
        let a_in = StreamInputs {
            text: &audio_text,
            text_bias: abias.as_ref(),
            temb: &atemb,
            temb_prompt: aprompt.as_ref(),
            exchange: (&a_ex.0, &a_ex.1),
            rope: &arope,
            exchange_rope: &ax_rope,
        };

        let mask = match x.perturbation_mask {
            Some(m) => Some(m.to_kind(kind).view([b, 1, 1])),
            None if !x.stg_blocks.is_empty() => Some(Tensor::zeros([b, 1, 1], (kind, dev))),
            None => None,
        };
        let all = mask.as_ref().is_some_and(|m| m.eq(0.0).all().int64_value(&[]) != 0);
        let exchange = x.exchange_mask.map(|m| m.to_kind(kind).view([b, 1, 1]));
        let (mut video, mut audio) = (video, audio);
        for (i, block) in self.blocks.iter().enumerate() {
            let perturb = match (&mask, x.stg_blocks.contains(&i)) {
                (Some(m), true) => Some(Perturbation { mask: m, all }),
                _ => None,
            };
            let o = BlockOptions { isolate: x.isolate_modalities, exchange: exchange.as_ref(), perturb, lora };
            (video, audio) = block.forward(&video, &audio, &v_in, &a_in, o);
        }
        Ok((self.video.head(&video, &vemb, lora), self.audio.head(&audio, &aemb, lora)))
    }

    /// Every linear, blocks in order after the stream ends.
    pub fn linears(&self) -> Vec<&Linear> {
        let mut out = Vec::new();
        for e in [&self.video, &self.audio] {
            out.push(&e.proj_in);
            if let Some(p) = &e.caption_projection {
                p.linears(&mut out);
            }
            for m in
                [Some(&e.time_embed), Some(&e.exchange_scale_shift), Some(&e.exchange_gate), e.prompt_adaln.as_ref()]
                    .into_iter()
                    .flatten()
            {
                m.linears(&mut out);
            }
            out.push(&e.proj_out);
        }
        for b in &self.blocks {
            b.linears(&mut out);
        }
        out
    }
}

/// LoRA on the transformer, served as [`fastvideo_layers::adapters::Adapted`].
impl LinearModel for Ltx2Transformer {
    fn linear_adapters(&self) -> &LinearAdapters {
        &self.adapters
    }
    fn adapted_linears(&self) -> Vec<&Linear> {
        self.linears()
    }
    fn compute_kind(&self) -> Kind {
        self.kind
    }
    fn adapter_device(&self) -> Device {
        self.video.proj_out.weight.device()
    }
    fn lora_keys(&self) -> &'static dyn KeyMap {
        &Ltx2Keys
    }
}

/// `s`, or an error saying `what` needs it.
fn sigma_or<'a>(s: Option<&'a Tensor>, what: &str) -> Result<&'a Tensor> {
    s.with_context(|| format!("ltx2 transformer: {what} needs a sigma"))
}
