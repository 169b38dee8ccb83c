//! `QwenImageTransformer2DModel`: the packed 2×2 latent patches and the prompt embedded, the
//! MMDiT blocks, and the image tokens' output projection. Samples of any size pack into one
//! forward ([`fastvideo_layers::joint`]).

use std::path::Path;

use anyhow::Result;
use fastvideo_layers::adapters::{LinearAdapters, LinearModel};
use fastvideo_layers::joint::{linear, Layout, PackedLora, RopeTables};
use fastvideo_layers::{Linear, Lora};
use fastvideo_lora::KeyMap;
use fastvideo_pipeline::AdapterSet;
use fastvideo_torch::weights::Weights;
use tch::{Device, Kind, Tensor};

use crate::block::Block;
use crate::config::TransformerConfig;
use crate::lora_keys::QwenImageKeys;
use crate::rope::QwenRope;

/// One sample of a packed forward.
pub struct Sample<'a> {
    /// Packed latent tokens `[Si, in]`: the output picture's, then any references'.
    pub image: &'a Tensor,
    /// The token grids `(h, w)` of the pictures in `image`, the output first.
    pub grids: &'a [(i64, i64)],
    /// Prompt embeddings `[St, joint]`.
    pub text: &'a Tensor,
    /// The sample's time in `[0, 1]` (the pipeline's `t / 1000`).
    pub timestep: f32,
}

/// The Qwen-Image transformer.
pub struct QwenImageTransformer {
    config: TransformerConfig,
    time_1: Linear,
    time_2: Linear,
    txt_norm: Tensor,
    img_in: Linear,
    txt_in: Linear,
    blocks: Vec<Block>,
    norm_out: Linear,
    proj_out: Linear,
    rope: QwenRope,
    kind: Kind,
    /// Its linears as LoRA sees them, and the set merged into them, if any.
    adapters: LinearAdapters,
}

// SAFETY: read-only weights after loading, except while an adapter set is merged or unmerged,
// which the engine does between forwards; libtorch's tensor reads are thread-safe.
unsafe impl Sync for QwenImageTransformer {}

/// Channels of the sinusoidal time features.
const TIME_CHANNELS: i64 = 256;

impl QwenImageTransformer {
    /// Loads `dir` onto `device` in `kind`.
    /// (Its weights from `file` instead of the folder's when given; with the file's quantized
    /// formats, as a load report names them.)
    pub fn load(dir: &Path, file: Option<&Path>, device: Device, kind: Kind) -> Result<(Self, Option<String>)> {
        use fastvideo_layers::single_file;
        let config = TransformerConfig::load(&dir.join("config.json"))?;
        let w = match file {
            Some(f) => single_file::diffusers_named(f, device, kind)?,
            None => Weights::from_dir(dir, "diffusion_pytorch_model", device, kind)?,
        };
        let t = Self::new(config, &w)?;
        match file {
            Some(f) => single_file::check_all_used(&w, f)?,
            None => w.warn_unused("Qwen-Image transformer"),
        }
        Ok((t, single_file::quantized_formats(&w)))
    }

    /// The transformer of `config` on weights `w`.
    pub fn new(config: TransformerConfig, w: &Weights) -> Result<Self> {
        let c = &config;
        let dim = c.inner_dim();
        let te = w.pp("time_text_embed.timestep_embedder");
        Ok(Self {
            time_1: Linear::new(&te.pp("linear_1"), TIME_CHANNELS, dim, true)?,
            time_2: Linear::new(&te.pp("linear_2"), dim, dim, true)?,
            txt_norm: w.get("txt_norm.weight", &[c.joint_attention_dim])?,
            img_in: Linear::new(&w.pp("img_in"), c.in_channels, dim, true)?,
            txt_in: Linear::new(&w.pp("txt_in"), c.joint_attention_dim, dim, true)?,
            blocks: (0..c.num_layers)
                .map(|i| Block::new(&w.pp(format!("transformer_blocks.{i}")), c))
                .collect::<Result<_>>()?,
            norm_out: Linear::new(&w.pp("norm_out.linear"), dim, 2 * dim, true)?,
            proj_out: Linear::new(&w.pp("proj_out"), dim, c.out_per_token(), true)?,
            rope: QwenRope::new(c.axes_dims_rope, w.device()),
            kind: w.kind(),
            adapters: LinearAdapters::new(w.linears()),
            config,
        })
    }

    /// Its architecture.
    pub fn config(&self) -> &TransformerConfig {
        &self.config
    }

    /// Its compute dtype.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// `Timesteps(256, flip_sin_to_cos, scale=1000)` then the two-layer MLP: `[B, dim]`.
    fn time_embedding(&self, times: &[f32], device: Device, lora: Lora) -> Tensor {
        let t = Tensor::from_slice(times).to_device(device).to_kind(self.kind).to_kind(Kind::Float);
        let half = TIME_CHANNELS / 2;
        let exponent = Tensor::arange(half, (Kind::Float, device)) * (-(10000f64.ln()) / half as f64);
        let args = t.unsqueeze(1) * exponent.exp().unsqueeze(0) * 1000.0;
        let proj = Tensor::cat(&[args.cos(), args.sin()], -1).to_kind(self.kind);
        linear(&self.time_2, &linear(&self.time_1, &proj, lora).silu(), lora)
    }

    /// `RMSNorm(joint)` of the prompt embeddings (float32 statistics).
    fn norm_text(&self, x: &Tensor) -> Tensor {
        let xf = x.to_kind(Kind::Float);
        let rms = (xf.square().mean_dim(-1, true, Kind::Float) + 1e-6).rsqrt();
        (xf * rms).to_kind(self.kind) * &self.txt_norm
    }

    /// The layout of `samples`.
    fn layout(samples: &[Sample]) -> Layout {
        let times: Vec<f32> = samples.iter().map(|s| s.timestep).collect();
        Layout::new(
            samples.iter().map(|s| s.text.size()[0]).collect(),
            samples.iter().map(|s| s.image.size()[0]).collect(),
            &times,
        )
    }

    /// Predictions `[Si, out]` of each sample of a pack, on the weights as they are (a merged
    /// adapter set included).
    pub fn forward_packed(&self, samples: &[Sample]) -> Vec<Tensor> {
        self.run(samples, &Self::layout(samples), None)
    }

    /// [`forward_packed`](Self::forward_packed) with each sample's adapter set (`sets`, by
    /// sample; `None`: without adapters): a merged set costs nothing, other sets run unmerged on
    /// their own samples' tokens.
    pub fn forward_adapted(&self, samples: &[Sample], sets: &[Option<&AdapterSet>]) -> Result<Vec<Tensor>> {
        let mut layout = Self::layout(samples);
        let lora = self.adapters.packed(&mut layout, sets, "Qwen-Image transformer")?;
        Ok(self.run(samples, &layout, lora.as_ref()))
    }

    fn run(&self, samples: &[Sample], layout: &Layout, lora: Option<&PackedLora>) -> Vec<Tensor> {
        let kind = self.kind;
        let device = samples[0].image.device();
        let times: Vec<f32> = samples.iter().map(|s| s.timestep).collect();
        let (rs, ri, rt) = (lora.map(|l| &l.samples), lora.map(|l| &l.image), lora.map(|l| &l.text));
        let temb = self.time_embedding(&times, device, rs);
        let cat = |f: &dyn Fn(&Sample) -> Tensor| Tensor::cat(&samples.iter().map(f).collect::<Vec<_>>(), 0);
        let mut x = linear(&self.img_in, &cat(&|s| s.image.to_kind(kind)), ri).unsqueeze(0);
        let mut ctx = linear(&self.txt_in, &self.norm_text(&cat(&|s| s.text.to_kind(kind))), rt).unsqueeze(0);
        let tables: Vec<(Tensor, Tensor)> =
            samples.iter().map(|s| self.rope.tables(s.text.size()[0], s.grids)).collect();
        let joint = (
            Tensor::cat(&tables.iter().map(|t| &t.0).collect::<Vec<_>>(), 0),
            Tensor::cat(&tables.iter().map(|t| &t.1).collect::<Vec<_>>(), 0),
        );
        let rope = RopeTables::new(joint, layout, self.config.num_attention_heads);
        // Edit-2511: reference tokens modulated at time 0, the output picture's at its time.
        let zero = self.config.zero_cond_t.then(|| {
            let temb0 = self.time_embedding(&vec![0.0; samples.len()], device, rs);
            let b = samples.len() as i64;
            let rows: Vec<i64> = samples
                .iter()
                .enumerate()
                .flat_map(|(i, s)| {
                    let noise = s.grids[0].0 * s.grids[0].1;
                    let refs = s.image.size()[0] - noise;
                    std::iter::repeat_n(i as i64, noise as usize)
                        .chain(std::iter::repeat_n(b + i as i64, refs as usize))
                })
                .collect();
            (temb0, Tensor::from_slice(&rows).to_device(device))
        });
        for block in &self.blocks {
            let zero_cond = zero.as_ref().map(|(t, r)| (t, r));
            (x, ctx) = block.forward(&x, &ctx, &temb, zero_cond, &rope, layout, lora);
        }
        let emb = linear(&self.norm_out, &temb.silu(), rs).unsqueeze(1);
        let parts = emb.chunk(2, -1);
        let (scale, shift) = (layout.spread(&parts[0], &layout.image), layout.spread(&parts[1], &layout.image));
        let out = fastvideo_layers::joint::Mod { scale, shift, gate: Tensor::new() }.modulate(&x, 1e-6);
        layout.unpack_image(&linear(&self.proj_out, &out, ri))
    }

    /// Every linear, in a fixed order (merging walks them).
    pub fn linears(&self) -> Vec<&Linear> {
        let mut out = vec![&self.time_1, &self.time_2, &self.img_in, &self.txt_in, &self.norm_out, &self.proj_out];
        self.blocks.iter().for_each(|b| b.linears(&mut out));
        out
    }

    /// The reference's call on one sample (`hidden_states [1, S, in]` of one picture `grid`,
    /// `text [1, St, joint]`, `timestep [1]` in `[0, 1]`): `[1, S, out]`.
    pub fn forward(&self, image: &Tensor, text: &Tensor, timestep: f32, grid: (i64, i64)) -> Tensor {
        let (image, text) = (image.get(0), text.get(0));
        let grids = [grid];
        let s = Sample { image: &image, grids: &grids, text: &text, timestep };
        self.forward_packed(&[s]).pop().expect("one sample").unsqueeze(0)
    }
}

/// LoRA on the transformer, served as [`fastvideo_layers::adapters::Adapted`].
impl LinearModel for QwenImageTransformer {
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
        self.proj_out.weight.device()
    }
    fn lora_keys(&self) -> &'static dyn KeyMap {
        &QwenImageKeys
    }
}
