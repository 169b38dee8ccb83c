//! `Flux2Transformer2DModel`: the text and image tokens embedded, the double-stream blocks,
//! the single-stream blocks on the joint sequence, and the image tokens' output projection.

use std::path::Path;

use anyhow::{ensure, Result};
use fastvideo_layers::adapters::{LinearAdapters, LinearModel};
use fastvideo_layers::joint::{linear, PackedLora, RopeTables};
use fastvideo_layers::Linear;
use fastvideo_lora::KeyMap;
use fastvideo_pipeline::AdapterSet;
use fastvideo_torch::weights::Weights;
use tch::{Device, Kind, Tensor};

use crate::config::TransformerConfig;
use crate::double_block::DoubleBlock;
use crate::embed::{Modulation, OutputNorm, TimeEmbed};
use crate::lora_keys::Flux2Keys;
use crate::packed::{self, Layout, Sample};
use crate::rope::Rope;
use crate::single_block::SingleBlock;

/// The FLUX.2 transformer.
pub struct Flux2Transformer {
    config: TransformerConfig,
    time: TimeEmbed,
    mod_image: Modulation,
    mod_text: Modulation,
    mod_single: Modulation,
    x_embedder: Linear,
    context_embedder: Linear,
    double: Vec<DoubleBlock>,
    single: Vec<SingleBlock>,
    norm_out: OutputNorm,
    proj_out: Linear,
    rope: Rope,
    kind: Kind,
    /// Its linears as LoRA sees them, and the set merged into them, if any.
    adapters: LinearAdapters,
}

// SAFETY: the weights are read-only after loading, except while an adapter set is merged or
// unmerged, which the engine does between forwards; libtorch's tensor reads are thread-safe;
// every request's state lives in its own tensors (as fastvideo-wan's models).
unsafe impl Sync for Flux2Transformer {}

impl Flux2Transformer {
    /// Loads `dir` (`config.json`, `diffusion_pytorch_model*.safetensors`) onto `device` in
    /// `kind`.
    pub fn load(dir: &Path, device: Device, kind: Kind) -> Result<Self> {
        let config = TransformerConfig::load(&dir.join("config.json"))?;
        let w = Weights::from_dir(dir, "diffusion_pytorch_model", device, kind)?;
        let t = Self::new(config, &w)?;
        w.warn_unused("FLUX.2 transformer");
        Ok(t)
    }

    /// The transformer of `config` on weights `w`.
    pub fn new(config: TransformerConfig, w: &Weights) -> Result<Self> {
        let c = &config;
        ensure!(
            !c.guidance_embeds || !w.contains("time_guidance_embed.guidance_embedder.linear_1.weight"),
            "this FLUX.2 transformer embeds a guidance scale (FLUX.2 [dev]); only [klein] is served"
        );
        let dim = c.inner_dim();
        Ok(Self {
            time: TimeEmbed::new(&w.pp("time_guidance_embed"), c.timestep_guidance_channels, dim)?,
            mod_image: Modulation::new(&w.pp("double_stream_modulation_img"), dim, 2)?,
            mod_text: Modulation::new(&w.pp("double_stream_modulation_txt"), dim, 2)?,
            mod_single: Modulation::new(&w.pp("single_stream_modulation"), dim, 1)?,
            x_embedder: Linear::new(&w.pp("x_embedder"), c.in_channels, dim, false)?,
            context_embedder: Linear::new(&w.pp("context_embedder"), c.joint_attention_dim, dim, false)?,
            double: (0..c.num_layers)
                .map(|i| DoubleBlock::new(&w.pp(format!("transformer_blocks.{i}")), c))
                .collect::<Result<_>>()?,
            single: (0..c.num_single_layers)
                .map(|i| SingleBlock::new(&w.pp(format!("single_transformer_blocks.{i}")), c))
                .collect::<Result<_>>()?,
            norm_out: OutputNorm::new(&w.pp("norm_out"), dim, c.eps)?,
            proj_out: Linear::new(&w.pp("proj_out"), dim, c.out_channels(), false)?,
            rope: Rope::new(&c.axes_dims_rope, c.rope_theta, w.device()),
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

    /// The prediction `[B, Si, out]` for image tokens `image [B, Si, in]` (noise tokens first,
    /// then any reference tokens) and prompt embeddings `text [B, St, joint]`, at times
    /// `timestep [B]` in `[0, 1]` (the pipeline's `t / 1000`), positions `image_ids [Si, 4]`
    /// and `text_ids [St, 4]`: the reference's call, as a pack of `B` samples.
    pub fn forward(
        &self,
        image: &Tensor,
        text: &Tensor,
        timestep: &Tensor,
        image_ids: &Tensor,
        text_ids: &Tensor,
    ) -> Tensor {
        let b = image.size()[0];
        let times: Vec<f32> = Vec::try_from(timestep.to_kind(Kind::Float).reshape([-1])).expect("float times");
        let (images, texts): (Vec<Tensor>, Vec<Tensor>) = (0..b).map(|i| (image.get(i), text.get(i))).unzip();
        let samples: Vec<Sample> = (0..b as usize)
            .map(|i| Sample { image: &images[i], text: &texts[i], timestep: times[i], image_ids, text_ids })
            .collect();
        Tensor::stack(&self.forward_packed(&samples), 0)
    }

    /// Predictions `[Si, out]` of each sample of a pack (see [`crate::packed`]), on the weights
    /// as they are (a merged adapter set included).
    pub fn forward_packed(&self, samples: &[Sample]) -> Vec<Tensor> {
        self.run(samples, &packed::layout(samples), None)
    }

    /// [`forward_packed`](Self::forward_packed) with each sample's adapter set (`sets`, by
    /// sample; `None`: without adapters): a merged set costs nothing, other sets run unmerged on
    /// their own samples' tokens.
    pub fn forward_adapted(&self, samples: &[Sample], sets: &[Option<&AdapterSet>]) -> Result<Vec<Tensor>> {
        let mut layout = packed::layout(samples);
        let lora = self.adapters.packed(&mut layout, sets, "FLUX.2 transformer")?;
        Ok(self.run(samples, &layout, lora.as_ref()))
    }

    fn run(&self, samples: &[Sample], layout: &Layout, lora: Option<&PackedLora>) -> Vec<Tensor> {
        let kind = self.kind;
        let device = samples[0].image.device();
        let rs = lora.map(|l| &l.samples);
        let temb = self.time.forward(&packed::timesteps(samples, kind, device), kind, rs);
        let mi = layout.spread_mods(&self.mod_image.forward(&temb, rs), &layout.image);
        let mt = layout.spread_mods(&self.mod_text.forward(&temb, rs), &layout.text);
        let joint_lengths: Vec<i64> = layout.text.iter().zip(&layout.image).map(|(t, i)| t + i).collect();
        let ms = layout.spread_mods(&self.mod_single.forward(&temb, rs), &joint_lengths);
        let cat = |f: &dyn Fn(&Sample) -> Tensor| Tensor::cat(&samples.iter().map(f).collect::<Vec<_>>(), 0);
        let (ri, rt) = (lora.map(|l| &l.image), lora.map(|l| &l.text));
        let mut x = linear(&self.x_embedder, &cat(&|s| s.image.to_kind(kind)), ri).unsqueeze(0);
        let mut ctx = linear(&self.context_embedder, &cat(&|s| s.text.to_kind(kind)), rt).unsqueeze(0);
        let ids: Vec<Tensor> =
            samples.iter().flat_map(|s| [s.text_ids.shallow_clone(), s.image_ids.shallow_clone()]).collect();
        let rope = RopeTables::new(self.rope.tables(&Tensor::cat(&ids, 0)), layout, self.config.num_attention_heads);
        for block in &self.double {
            (x, ctx) = block.forward(&x, &ctx, &mi, &mt, &rope, layout, lora);
        }
        let spans = layout.spans();
        let mut h = layout.interleave(&ctx, &x);
        for block in &self.single {
            h = block.forward(&h, &ms[0], &rope, &spans, lora.map(|l| &l.joint));
        }
        let (_, image) = layout.split(&h);
        let (scale, shift) = self.norm_out.modulation(&temb, rs);
        let out =
            self.norm_out.forward(&image, layout.spread(&scale, &layout.image), layout.spread(&shift, &layout.image));
        layout.unpack_image(&linear(&self.proj_out, &out, ri))
    }

    /// Every linear, in a fixed order (merging walks them).
    pub fn linears(&self) -> Vec<&Linear> {
        let mut out = Vec::new();
        self.time.linears(&mut out);
        out.extend([self.mod_image.linear(), self.mod_text.linear(), self.mod_single.linear()]);
        out.extend([&self.x_embedder, &self.context_embedder, self.norm_out.linear(), &self.proj_out]);
        self.double.iter().for_each(|b| b.linears(&mut out));
        self.single.iter().for_each(|b| b.linears(&mut out));
        out
    }
}

/// LoRA on the transformer, served as [`fastvideo_layers::adapters::Adapted`].
impl LinearModel for Flux2Transformer {
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
        &Flux2Keys
    }
}
