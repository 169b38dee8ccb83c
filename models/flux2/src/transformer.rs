//! `Flux2Transformer2DModel`: the text and image tokens embedded, the double-stream blocks,
//! the single-stream blocks on the joint sequence, and the image tokens' output projection.

use std::path::Path;

use anyhow::{ensure, Result};
use fastvideo_layers::Linear;
use fastvideo_torch::weights::Weights;
use tch::{Device, Kind, Tensor};

use crate::config::TransformerConfig;
use crate::double_block::DoubleBlock;
use crate::embed::{Modulation, OutputNorm, TimeEmbed};
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
}

// SAFETY: the weights are read-only after loading and libtorch's tensor reads are thread-safe;
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
    /// and `text_ids [St, 4]`.
    pub fn forward(
        &self,
        image: &Tensor,
        text: &Tensor,
        timestep: &Tensor,
        image_ids: &Tensor,
        text_ids: &Tensor,
    ) -> Tensor {
        let kind = self.kind;
        let t = timestep.to_kind(kind) * 1000.0;
        let temb = self.time.forward(&t, kind);
        let (mi, mt, ms) =
            (self.mod_image.forward(&temb), self.mod_text.forward(&temb), self.mod_single.forward(&temb));
        let mut x = self.x_embedder.forward(&image.to_kind(kind));
        let mut ctx = self.context_embedder.forward(&text.to_kind(kind));
        let rope = self.rope.tables(&Tensor::cat(&[text_ids, image_ids], 0));
        for block in &self.double {
            (x, ctx) = block.forward(&x, &ctx, &mi, &mt, &rope);
        }
        let st = ctx.size()[1];
        let mut h = Tensor::cat(&[ctx, x], 1);
        for block in &self.single {
            h = block.forward(&h, &ms[0], &rope);
        }
        let si = h.size()[1] - st;
        let out = self.norm_out.forward(&h.narrow(1, st, si), &temb);
        self.proj_out.forward(&out)
    }
}
