//! `Cosmos3OmniTransformer`: token embeddings and a stack of mixture-of-transformers layers whose
//! text pathway is a Qwen3-VL (or Nemotron) language model and whose generation pathway denoises
//! vision, sound and action tokens, meeting in one joint attention per layer.
//!
//! The forward is split where the computation splits: [`Cosmos3Transformer::prefix`] runs the
//! prompt once (its keys and values per layer); [`Cosmos3Transformer::forward`] runs the
//! generation tokens of one or more branches against their prefixes, once per denoise step.
//! The reference runs both every step; the results are the same numbers.

use std::path::Path;

use anyhow::{bail, ensure, Context, Result};
use fastvideo_layers::Linear;
use fastvideo_pipeline::packed::{Modality, PackedSeq};
use fastvideo_torch::weights::Weights;
use tch::{Device, Kind, Tensor};

use crate::attention::LayerKv;
use crate::config::Cosmos3Config;
use crate::embed::{patchify, unpatchify, DomainAwareLinear, TimeEmbedder};
use crate::layer::MotLayer;
use crate::norm::RmsNorm;
use crate::rope::MRope;

/// One prompt's per-layer keys and values: computed once, read by every step of every branch
/// that uses this prompt.
pub struct Prefix {
    /// Per layer.
    pub layers: Vec<LayerKv>,
    /// Prompt tokens.
    pub len: i64,
}

impl Prefix {
    /// Bytes the cached keys and values hold.
    pub fn bytes(&self) -> u64 {
        let t = |x: &Tensor| x.numel() as u64 * x.kind().elt_size_in_bytes() as u64;
        self.layers.iter().map(|l| t(&l.k) + t(&l.v)).sum()
    }
}

/// The generation inputs of one forward, shared by its branches.
pub struct GenInput<'a> {
    /// Vision latent `[C, T, h, w]`.
    pub vision: &'a Tensor,
    /// Sound latent `[C_s, T_s]`, when the sequence has a sound segment.
    pub sound: Option<&'a Tensor>,
    /// Actions `[T_a, action_dim]`, when the sequence has an action segment.
    pub action: Option<&'a Tensor>,
    /// Embodiment domain id of the actions.
    pub domain: Option<i64>,
    /// The scheduler's timestep (added, scaled, to noisy tokens only).
    pub timestep: f64,
}

/// Velocity predictions per branch (leading dimension), zero at clean frames.
pub struct Prediction {
    /// `[B, C, T, h, w]`.
    pub vision: Tensor,
    /// `[B, C_s, T_s]`.
    pub sound: Option<Tensor>,
    /// `[B, T_a, action_dim]`.
    pub action: Option<Tensor>,
}

struct SoundHeads {
    proj_in: Linear,
    proj_out: Linear,
    embed: Tensor,
    dim: i64,
}

struct ActionHeads {
    proj_in: DomainAwareLinear,
    proj_out: DomainAwareLinear,
    embed: Tensor,
    dim: i64,
}

/// The transformer.
pub struct Cosmos3Transformer {
    cfg: Cosmos3Config,
    embed_tokens: Tensor,
    layers: Vec<MotLayer>,
    norm_moe_gen: RmsNorm,
    proj_in: Linear,
    proj_out: Linear,
    time: TimeEmbedder,
    sound: Option<SoundHeads>,
    action: Option<ActionHeads>,
    rope: MRope,
    kind: Kind,
    device: Device,
    /// The text pathway's final norm and LM head (the reasoner's), when the checkpoint has them.
    head: Option<(Tensor, Tensor)>,
}

// SAFETY: the weights are read-only after construction and libtorch kernels may read one
// tensor from several threads; nothing here mutates shared state.
unsafe impl Sync for Cosmos3Transformer {}

impl Cosmos3Transformer {
    /// Loads a `transformer/` folder (config and safetensors) onto `device` in `kind`.
    pub fn load(dir: &Path, device: Device, kind: Kind) -> Result<Self> {
        let cfg = Cosmos3Config::load(&dir.join("config.json"))?;
        let w = Weights::from_dir(dir, "diffusion_pytorch_model", device, kind)
            .with_context(|| format!("loading the Cosmos3 transformer from {}", dir.display()))?;
        Self::new(&w, cfg)
    }

    /// Builds the generation pathway and the text pathway's layers from `w` (flat layout: no
    /// `model.` prefix). `norm` and `lm_head` belong to the reasoner and are not read here.
    pub fn new(w: &Weights, cfg: Cosmos3Config) -> Result<Self> {
        let act = cfg.activation()?;
        let h = cfg.hidden_size;
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| MotLayer::new(&w.pp(format!("layers.{i}")), &cfg, act))
            .collect::<Result<_>>()?;
        let sound = match cfg.sound() {
            Some(dim) => Some(SoundHeads {
                proj_in: Linear::new(&w.pp("audio_proj_in"), dim, h, true)?,
                proj_out: Linear::new(&w.pp("audio_proj_out"), h, dim, true)?,
                embed: w.get("audio_modality_embed", &[h])?,
                dim,
            }),
            None => None,
        };
        let action = match cfg.action() {
            Some(dim) => Some(ActionHeads {
                proj_in: DomainAwareLinear::new(&w.pp("action_proj_in"), dim, h, cfg.num_embodiment_domains)?,
                proj_out: DomainAwareLinear::new(&w.pp("action_proj_out"), h, dim, cfg.num_embodiment_domains)?,
                embed: w.get("action_modality_embed", &[h])?,
                dim,
            }),
            None => None,
        };
        Ok(Self {
            embed_tokens: w.get("embed_tokens.weight", &[cfg.vocab_size, h])?,
            layers,
            norm_moe_gen: crate::norm::RmsNorm::new(&w.pp("norm_moe_gen"), h, cfg.rms_norm_eps, act)?,
            proj_in: Linear::new(&w.pp("proj_in"), cfg.patch_latent_dim, h, true)?,
            proj_out: Linear::new(&w.pp("proj_out"), h, cfg.patch_latent_dim, true)?,
            time: TimeEmbedder::new(&w.pp("time_embedder"), h, cfg.timestep_scale)?,
            sound,
            action,
            rope: MRope::new(cfg.head_dim, cfg.rope_theta, cfg.sections(), w.device()),
            head: match (w.contains("norm.weight"), w.contains("lm_head.weight")) {
                (true, true) => Some((w.get("norm.weight", &[h])?, w.get("lm_head.weight", &[cfg.vocab_size, h])?)),
                _ => None,
            },
            kind: w.kind(),
            device: w.device(),
            cfg,
        })
    }

    /// Bytes of the weights it holds on the device: `(text pathway incl. the token embeddings,
    /// everything else)`. One copy serves both loops.
    pub fn bytes(&self) -> (u64, u64) {
        use fastvideo_layers::tensor_bytes as t;
        let (mut und, mut gen) = (t(&self.embed_tokens), 0);
        for l in &self.layers {
            let (u, g) = l.bytes();
            und += u;
            gen += g;
        }
        gen += self.norm_moe_gen.bytes() + self.proj_in.bytes() + self.proj_out.bytes() + self.time.bytes();
        if let Some(s) = &self.sound {
            gen += s.proj_in.bytes() + s.proj_out.bytes() + t(&s.embed);
        }
        if let Some(a) = &self.action {
            gen += a.proj_in.bytes() + a.proj_out.bytes() + t(&a.embed);
        }
        (und, gen)
    }

    /// The text pathway as a Qwen3 decoder's weights, shared with this model (the reasoner);
    /// `None` when the checkpoint has no LM head or the layout is not Qwen3's.
    pub fn text_weights(&self) -> Option<fastvideo_qwen::shared::SharedWeights> {
        let (norm, lm_head) = self.head.as_ref()?;
        let layers = self.layers.iter().map(MotLayer::text_layer).collect::<Option<Vec<_>>>()?;
        Some(fastvideo_qwen::shared::SharedWeights {
            embed_tokens: self.embed_tokens.shallow_clone(),
            layers,
            norm: norm.shallow_clone(),
            lm_head: lm_head.shallow_clone(),
        })
    }

    /// Bytes of the reasoner's own weights (the final text norm and the LM head).
    pub fn head_bytes(&self) -> u64 {
        self.head.as_ref().map_or(0, |(n, l)| fastvideo_layers::tensor_bytes(n) + fastvideo_layers::tensor_bytes(l))
    }

    /// The architecture.
    pub fn config(&self) -> &Cosmos3Config {
        &self.cfg
    }

    /// Compute dtype.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Device of the weights.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The text pathway over prompt `ids` at `positions [3, L]`: every layer's keys and values
    /// as the generation stream reads them.
    pub fn prefix(&self, ids: &[i64], positions: &Tensor) -> Result<Prefix> {
        ensure!(!ids.is_empty(), "Cosmos3: an empty prompt");
        if let Some(bad) = ids.iter().find(|&&i| !(0..self.cfg.vocab_size).contains(&i)) {
            bail!("Cosmos3: token id {bad} is outside the vocabulary of {}", self.cfg.vocab_size);
        }
        let _guard = tch::no_grad_guard();
        let ids = Tensor::from_slice(ids).to_device(self.device);
        let u = self.embed_tokens.index_select(0, &ids).unsqueeze(0);
        let (cos, sin) = self.rope.tables(positions, self.kind);
        let last = self.layers.len() - 1;
        let layers = self.layers.iter().enumerate().map(|(i, l)| l.prefix(&u, (&cos, &sin), i == last)).collect();
        Ok(Prefix { layers, len: ids.size()[0] })
    }

    /// Generation tokens `[L_gen, C]` of `seq`'s full segments for `input`, timestep embedding
    /// added to noisy tokens.
    fn gen_tokens(&self, seq: &PackedSeq, input: &GenInput) -> Result<Tensor> {
        let temb = self.time.forward(input.timestep, self.kind, self.device);
        let with_time = |tokens: Tensor, noisy: Vec<i64>| -> Tensor {
            if noisy.is_empty() {
                return tokens;
            }
            let n = noisy.len() as i64;
            let idx = Tensor::from_slice(&noisy).to_device(self.device);
            tokens.index_add(0, &idx, &temb.expand([n, -1], false))
        };
        let mut parts = Vec::new();
        for s in seq.segments().iter().skip_while(|s| s.modality == Modality::Text) {
            let tokens = match s.modality {
                Modality::Vision => {
                    let p = patchify(&input.vision.to_kind(self.kind), self.cfg.latent_patch_size);
                    ensure!(p.size()[0] == s.len(), "Cosmos3: vision latent does not match its segment");
                    self.proj_in.forward(&p)
                }
                Modality::Sound => {
                    let (heads, x) = match (&self.sound, input.sound) {
                        (Some(h), Some(x)) => (h, x),
                        _ => bail!("Cosmos3: a sound segment without the model's sound heads or a sound latent"),
                    };
                    self.linear_in(&heads.proj_in, &x.tr().to_kind(self.kind)) + &heads.embed
                }
                Modality::Action => {
                    let (heads, x) = match (&self.action, input.action) {
                        (Some(h), Some(x)) => (h, x),
                        _ => bail!("Cosmos3: an action segment without the model's action heads or actions"),
                    };
                    let d = input.domain.context("Cosmos3: actions need an embodiment domain")?;
                    heads.proj_in.forward(&x.to_kind(self.kind), d)? + &heads.embed
                }
                Modality::Text => bail!("Cosmos3: text after generated tokens"),
            };
            parts.push(with_time(tokens, s.noisy_tokens()));
        }
        Ok(Tensor::cat(&parts, 0))
    }

    fn linear_in(&self, l: &Linear, x: &Tensor) -> Tensor {
        l.forward(x)
    }

    /// One denoise forward of `B = seqs.len()` branches (same generation inputs, own prompts):
    /// velocity predictions per branch.
    pub fn forward(&self, seqs: &[&PackedSeq], prefixes: &[&Prefix], input: &GenInput) -> Result<Prediction> {
        ensure!(!seqs.is_empty() && seqs.len() == prefixes.len(), "Cosmos3: one prefix per branch");
        let _guard = tch::no_grad_guard();
        for (s, p) in seqs.iter().zip(prefixes) {
            ensure!(s.prefix_len() == p.len, "Cosmos3: the prefix is not this sequence's prompt");
        }
        let b = seqs.len() as i64;
        let tokens = self.gen_tokens(seqs[0], input)?;
        let l = tokens.size()[0];
        let g = tokens.unsqueeze(0).expand([b, l, -1], false).contiguous();
        let tables: Vec<(Tensor, Tensor)> =
            seqs.iter().map(|s| self.rope.tables(&s.full_positions(self.device), self.kind)).collect();
        let cos = Tensor::stack(&tables.iter().map(|t| t.0.unsqueeze(0)).collect::<Vec<_>>(), 0);
        let sin = Tensor::stack(&tables.iter().map(|t| t.1.unsqueeze(0)).collect::<Vec<_>>(), 0);
        let half = (fastvideo_kernels::head_rope::available(self.device)
            && self.cfg.head_dim == fastvideo_kernels::head_rope::HEAD_DIM)
            .then(|| {
                let t: Vec<(Tensor, Tensor)> =
                    seqs.iter().map(|s| self.rope.half_tables(&s.full_positions(self.device), self.kind)).collect();
                (
                    Tensor::cat(&t.iter().map(|x| &x.0).collect::<Vec<_>>(), 0),
                    Tensor::cat(&t.iter().map(|x| &x.1).collect::<Vec<_>>(), 0),
                )
            });
        let rope = crate::attention::GenRope { cos, sin, half };
        for (i, layer) in self.layers.iter().enumerate() {
            let kv: Vec<&LayerKv> = prefixes.iter().map(|p| &p.layers[i]).collect();
            layer.generation(&g, &rope, &kv);
        }
        let g = self.norm_moe_gen.forward(&g);
        self.heads(seqs[0], &g, input)
    }

    /// Velocity predictions of the noisy tokens of each modality.
    fn heads(&self, seq: &PackedSeq, g: &Tensor, input: &GenInput) -> Result<Prediction> {
        let b = g.size()[0];
        let prefix = seq.prefix_len();
        let rows = |start: i64, noisy: &[i64]| -> Tensor {
            let idx: Vec<i64> = noisy.iter().map(|i| start - prefix + i).collect();
            g.index_select(1, &Tensor::from_slice(&idx).to_device(self.device))
        };
        let mut out = Prediction { vision: Tensor::new(), sound: None, action: None };
        let (start, s) = seq.find(Modality::Vision).context("Cosmos3: no vision segment")?;
        let (c, t, h, w) = input.vision.size4()?;
        let p = self.cfg.latent_patch_size;
        let v = self.proj_out.forward(&rows(start, &s.noisy_tokens())).to_kind(Kind::Float);
        let frames = Tensor::from_slice(&s.noisy_frames).to_device(self.device);
        let n = s.noisy_frames.len() as i64;
        let vision = Tensor::zeros([b, c, t, h, w], (Kind::Float, self.device));
        for i in 0..b {
            if n > 0 {
                let lat = unpatchify(&v.get(i), c, n, h, w, p);
                let _ = vision.get(i).index_copy_(1, &frames, &lat);
            }
        }
        out.vision = vision;
        if let (Some((start, s)), Some(heads)) = (seq.find(Modality::Sound), &self.sound) {
            let y = heads.proj_out.forward(&rows(start, &s.noisy_tokens())).to_kind(Kind::Float);
            let mut sound = Tensor::zeros([b, s.grid[0], heads.dim], (Kind::Float, self.device));
            let idx = Tensor::from_slice(&s.noisy_frames).to_device(self.device);
            let _ = sound.index_copy_(1, &idx, &y);
            out.sound = Some(sound.transpose(1, 2).contiguous());
        }
        if let (Some((start, s)), Some(heads)) = (seq.find(Modality::Action), &self.action) {
            let mut action = Tensor::zeros([b, s.grid[0], heads.dim], (Kind::Float, self.device));
            if !s.noisy_frames.is_empty() {
                let d = input.domain.context("Cosmos3: actions need an embodiment domain")?;
                let y = heads.proj_out.forward(&rows(start, &s.noisy_tokens()), d)?.to_kind(Kind::Float);
                let idx = Tensor::from_slice(&s.noisy_frames).to_device(self.device);
                let _ = action.index_copy_(1, &idx, &y);
            }
            out.action = Some(action);
        }
        Ok(out)
    }
}
