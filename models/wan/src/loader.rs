//! Loading a diffusers-layout Wan folder: `model_index.json`, then each component's config and
//! (possibly sharded) safetensors. Every failure names the file, and for configs the key.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, ensure, Context, Result};
use fastvideo_layers::config::unsupported;
use fastvideo_layers::image_processor::{ImageProcessorConfig, ProcessorBackend};
use fastvideo_layers::tokenizer::TextTokenizer;
use fastvideo_parallel::ParallelPlan;
use fastvideo_request::{Defaults, ImageRole, ModelLimits, PictureLimits, TaskType, VideoLimits};
use serde_json::Value;
use tch::{Device, Kind};

use crate::clip_vision::{ClipVisionConfig, ClipVisionEncoder};
use crate::parallel::transformer::{load_from_files, transformer_checkpoint, ParallelTransformer};
use crate::scheduler::{self, SchedulerDefaults};
use crate::transformer::{TransformerConfig, WanTransformer3DModel};
use crate::umt5::{Umt5Config, Umt5Encoder};
use crate::vae::{AutoencoderKLWan, VaeConfig};
use crate::weights::Weights;

pub use crate::load_options::{LoadOptions, LoadReport, VAE_CUDA_DEFAULT};
pub use fastvideo_family::RunDefaults;

/// A loaded Wan model (2.1, or 2.2 with two experts).
pub struct WanModel {
    /// The folder it was loaded from.
    pub dir: PathBuf,
    /// The text encoder's tokenizer.
    pub tokenizer: TextTokenizer,
    /// The UMT5 text encoder.
    pub text_encoder: Arc<Umt5Encoder>,
    /// The transformer; of a two-expert model (Wan 2.2 A14B), the high-noise expert.
    pub transformer: Arc<WanTransformer3DModel>,
    /// A two-expert model's low-noise expert (`transformer_2/`) and the boundary ratio below
    /// which it runs (`model_index.json`'s `boundary_ratio`).
    pub low_noise: Option<LowNoiseExpert>,
    /// `--offload-experts`: the experts take turns on the device.
    pub offload: Option<Arc<crate::offload::ExpertSwap>>,
    /// The VAE, which encodes input pictures and videos and decodes the result.
    pub vae: Arc<AutoencoderKLWan>,
    /// `tiny_vae/`, when the folder has one: a small decoder trained to mimic `vae`'s, for
    /// previews and for world sessions that opt into it.
    pub tiny_vae: Option<Arc<crate::tiny_vae::TinyVideoDecoder>>,
    /// Prompt embeddings already computed with this text encoder (shared by every pipeline
    /// built from this model).
    pub text_cache: Arc<fastvideo_pipeline::EmbeddingCache>,
    /// The scheduler's defaults from `scheduler/scheduler_config.json`.
    pub scheduler: SchedulerDefaults,
    /// Run defaults from `fastvideo.json`, when the folder has one.
    pub run: RunDefaults,
    /// The device it runs on (rank 0's when split).
    pub device: Device,
    /// What the load cost and chose.
    pub load_report: LoadReport,
    /// The transformer over several ranks (`--gpus N --parallel …`); `None` runs it on `device`.
    pub parallel: Option<Arc<ParallelTransformer>>,
    /// An image-to-video model's image encoder and its preprocessing (`None`: text-to-video).
    pub image: Option<ImageConditioning>,
    /// Wan 2.2 TI2V (`expand_timesteps`): one model for text and text+image to video, the picture
    /// given as the clean first latent frame (its tokens at timestep 0).
    pub expand_timesteps: bool,
}

/// Wan 2.2 A14B's second expert.
#[derive(Clone)]
pub struct LowNoiseExpert {
    /// The low-noise expert's transformer (`transformer_2/`).
    pub transformer: Arc<WanTransformer3DModel>,
    /// Steps with timesteps below `boundary_ratio × 1000` run on this expert.
    pub boundary_ratio: f32,
}

/// What an image-to-video folder adds: the picture's conditioning.
#[derive(Clone)]
pub struct ImageConditioning {
    /// `image_encoder/` and `image_processor/` (Wan 2.1 I2V and FLF2V); `None` for Wan 2.2's
    /// image-to-video, whose transformer takes no image states (`image_dim` null).
    pub clip: Option<ClipImage>,
}

/// A CLIP image encoder and its preprocessing.
#[derive(Clone)]
pub struct ClipImage {
    /// The CLIP vision encoder (`image_encoder/`).
    pub encoder: Arc<ClipVisionEncoder>,
    /// How pictures are prepared for it (`image_processor/`).
    pub processor: Arc<ImageProcessorConfig>,
}

fn component_class(dir: &Path, index: &serde_json::Map<String, Value>, name: &str) -> Result<String> {
    let path = dir.join("model_index.json");
    match index.get(name) {
        Some(Value::Array(a)) if a.len() == 2 && a[1].is_string() => Ok(a[1].as_str().unwrap().to_string()),
        Some(v) => bail!("{}: component `{name}` = {v} is not [library, class]", path.display()),
        None => bail!("{}: component `{name}` is missing", path.display()),
    }
}

impl WanModel {
    /// Loads every component onto `device` in its default dtype there (float32 on CPU).
    pub fn load(dir: &Path, device: Device) -> Result<Self> {
        Self::load_with(dir, LoadOptions::new(device))
    }

    /// Loads every component with the given device and dtypes. Weights are converted once,
    /// here; the modules the reference keeps in float32 stay float32.
    pub fn load_with(dir: &Path, opts: LoadOptions) -> Result<Self> {
        let t0 = std::time::Instant::now();
        let device = opts.device;
        if !dir.is_dir() {
            bail!("model folder {} does not exist", dir.display());
        }
        let index_path = dir.join("model_index.json");
        let text = std::fs::read_to_string(&index_path).with_context(|| {
            format!("{} is not a diffusers model folder: cannot read model_index.json", dir.display())
        })?;
        let index: serde_json::Map<String, Value> =
            serde_json::from_str(&text).with_context(|| format!("{}: not a JSON object", index_path.display()))?;
        let image_to_video = match index.get("_class_name").and_then(Value::as_str) {
            // diffusers' video-to-video pipeline holds the text-to-video one's components.
            Some("WanPipeline" | "WanVideoToVideoPipeline") => false,
            Some("WanImageToVideoPipeline") => true,
            other => bail!(
                "{}: `_class_name` = {other:?}; WanPipeline (Wan 2.1 text-to-video), WanVideoToVideoPipeline and \
                 WanImageToVideoPipeline (image-to-video, first-and-last-frame) are supported",
                index_path.display()
            ),
        };
        let boundary_ratio = match index.get("boundary_ratio").filter(|v| !v.is_null()) {
            None => None,
            Some(v) => match v.as_f64().filter(|b| (0.0..=1.0).contains(b)) {
                Some(b) => Some(b as f32),
                None => return Err(unsupported(&index_path, "boundary_ratio", v, "a number in [0, 1]")),
            },
        };
        let has_second = index.get("transformer_2").is_some_and(|v| !is_null_component(v));
        if boundary_ratio.is_some() && !has_second {
            bail!(
                "{}: `boundary_ratio` is set but there is no `transformer_2` (the low-noise expert)",
                index_path.display()
            );
        }
        if has_second && boundary_ratio.is_none() {
            // diffusers runs `transformer` throughout then; so do we, without loading the second.
            tracing::warn!(dir = %dir.display(), "transformer_2 is listed but boundary_ratio is null: it is never used");
        }
        let expand_timesteps = match index.get("expand_timesteps") {
            None | Some(Value::Null) | Some(Value::Bool(false)) => false,
            Some(Value::Bool(true)) => true,
            Some(v) => return Err(unsupported(&index_path, "expand_timesteps", v, "true or false")),
        };
        if expand_timesteps && boundary_ratio.is_some() {
            return Err(unsupported(
                &index_path,
                "expand_timesteps",
                true,
                "with one transformer (boundary_ratio null)",
            ));
        }
        for (name, want) in [
            ("transformer", "WanTransformer3DModel"),
            ("vae", "AutoencoderKLWan"),
            ("text_encoder", "UMT5EncoderModel"),
        ] {
            let class = component_class(dir, &index, name)?;
            if class != want {
                return Err(unsupported(&index_path, name, class, &format!("only {want}")));
            }
        }
        if boundary_ratio.is_some() {
            let class = component_class(dir, &index, "transformer_2")?;
            if class != "WanTransformer3DModel" {
                return Err(unsupported(&index_path, "transformer_2", class, "only WanTransformer3DModel"));
            }
        }
        component_class(dir, &index, "tokenizer")?;
        component_class(dir, &index, "scheduler")?;

        let kind = opts.dtype.resolve(device);
        let vae_kind = opts.vae_dtype.resolve_or(device, VAE_CUDA_DEFAULT);
        if let (true, Device::Cuda(i)) = (opts.fp8_linears, device) {
            ensure!(
                kind == Kind::BFloat16,
                "fp8_linears computes in bf16 on CUDA; drop --dtype {} or fp8_linears",
                fastvideo_torch::kind_name(kind)
            );
            ensure!(
                fastvideo_kernels::fp8::supports_fp8(i),
                "fp8_linears: CUDA device {i} has no FP8 tensor cores (compute capability 8.9 or later), or the \
                 CUDA kernels could not be compiled (see the log)"
            );
        }
        if let (Some(recipe), Device::Cuda(_)) = (opts.int8_attention, device) {
            if !fastvideo_kernels::attention8::available(device) {
                tracing::warn!(
                    "{}: no 8-bit attention kernel on this GPU (it needs compute capability 9.0 and the CUDA \
                     kernels compiled); self-attention runs SDPA",
                    recipe.name()
                );
            }
        }
        let t_dir = dir.join("transformer");
        let t_cfg = TransformerConfig::load(&t_dir.join("config.json"))?;
        // Offloaded experts: the low-noise one loads first and is parked in host memory, so the
        // high-noise one reuses its device blocks (offload.rs).
        let parked = match boundary_ratio {
            Some(_) if opts.offload_experts => {
                let t2 = Arc::new(with_lossy_options(
                    load_second_expert(dir, &t_cfg, device, kind)?,
                    opts.fp8_linears,
                    opts.int8_attention,
                ));
                Some(crate::offload::ExpertSwap::park(t2, device))
            }
            _ => None,
        };
        let file = opts.transformer_file.as_deref();
        let t_w = crate::single_file::or_folder(file, &t_dir, boundary_ratio.is_some(), device, kind)?;
        let e_dir = dir.join("text_encoder");
        let e_path = e_dir.join("config.json");
        let e_cfg = Umt5Config::load(&e_path)?;
        let e_w = Weights::from_dir(&e_dir, "model", device, kind)?;
        let v_dir = dir.join("vae");
        let v_w = Weights::from_dir(&v_dir, "diffusion_pytorch_model", device, vae_kind)?;
        let budget = crate::device_budget::for_load(
            &opts,
            &crate::device_budget::LoadInputs {
                dir,
                transformer: (&t_w, t_cfg.num_layers as usize),
                text_encoder: (&e_w, e_cfg.num_layers as usize),
                vae: &v_w,
                two_experts: boundary_ratio.is_some(),
            },
        )?;
        // Lazily where it can be: one transformer, no FP8 linears (their scales are made here),
        // nothing streamed (a streamed model does not sleep).
        let lazy = opts.lazy_transformer && boundary_ratio.is_none() && !opts.fp8_linears && budget.is_none();
        if lazy {
            t_w.defer_linears();
        }
        // An FP8 checkpoint's weights feed the FP8 GEMM as they are where the preset runs FP8
        // linears (no second rounding); elsewhere they are dequantized.
        if opts.fp8_linears {
            // The layers `--fp8-linears` quantizes: every block but the first and the last.
            let n = t_cfg.num_layers as usize;
            t_w.keep_fp8(Box::new(move |key| crate::transformer::fp8_block(key, n)));
        }
        let streamed = budget.as_ref().and_then(|b| b.transformer);
        let built = WanTransformer3DModel::new_streamed(t_cfg.clone(), &t_w, streamed)?;
        if let Some(file) = file {
            crate::single_file::check_all_used(&t_w, file)?;
        }
        if let Some(q) = &t_cfg.quantization_config {
            q.check_weights(&t_dir.join("config.json"), &t_w.linears(), &t_w)?;
        }
        let transformer = Arc::new(with_lossy_options(built, opts.fp8_linears, opts.int8_attention));
        // A lazy model's first wake reads the checkpoint as a weight update does, which refuses
        // tensors the model lacks: refuse them now, not at that first request.
        if let (true, Some(first)) = (lazy, t_w.unused().first()) {
            bail!(
                "{}: `{first}` is not a tensor of this transformer; a model served lazily reads its checkpoint \
                 again at its first wake, which refuses tensors of another model",
                t_dir.display()
            );
        }
        t_w.warn_unused("transformer");
        let quantized_weights = crate::single_file::quantized_formats(&t_w);
        let deferred_linear_bytes = lazy.then(|| t_w.deferred_bytes());
        let (low_noise, offload) = match (boundary_ratio, parked) {
            (Some(boundary_ratio), Some(parked)) => {
                let t2 = Arc::clone(parked.expert());
                let swap = crate::offload::ExpertSwap::new(Arc::clone(&transformer), parked, device)?;
                (Some(LowNoiseExpert { transformer: t2, boundary_ratio }), Some(Arc::new(swap)))
            }
            (Some(boundary_ratio), None) => {
                let t2 = Arc::new(with_lossy_options(
                    load_second_expert(dir, &t_cfg, device, kind)?,
                    opts.fp8_linears,
                    opts.int8_attention,
                ));
                (Some(LowNoiseExpert { transformer: t2, boundary_ratio }), None)
            }
            (None, _) => (None, None),
        };

        let v_cfg = VaeConfig::load(&v_dir.join("config.json"))?;
        let vae = AutoencoderKLWan::new(v_cfg, &v_w)?;
        v_w.warn_unused("vae");
        let tiny_dir = dir.join("tiny_vae");
        let tiny_vae = match tiny_dir.join("config.json").is_file() {
            true => Some(Arc::new(crate::tiny_vae::TinyVideoDecoder::load(&tiny_dir, device, vae_kind)?)),
            false => None,
        };

        let streamed = budget.as_ref().and_then(|b| b.text_encoder);
        let text_encoder = Umt5Encoder::new_streamed(e_cfg, &e_w, &e_path, streamed)?;

        if text_encoder.cfg.d_model != transformer.cfg.text_dim {
            bail!(
                "{}: text encoder d_model {} does not match transformer text_dim {}",
                dir.display(),
                text_encoder.cfg.d_model,
                transformer.cfg.text_dim
            );
        }
        // Image-to-video input: noise latents, the mask (one channel per frame of a latent frame)
        // and the encoded picture(s).
        let z = vae.cfg.z_dim;
        // A first-frame model sees the latents alone (the picture is their first frame).
        let in_channels = if image_to_video && !expand_timesteps { 2 * z + vae.cfg.temporal_factor() } else { z };
        if transformer.cfg.in_channels != in_channels || transformer.cfg.out_channels() != z {
            bail!(
                "{}: transformer in/out channels {}/{} do not match the vae's z_dim {z} (expected {in_channels}/{z})",
                dir.display(),
                transformer.cfg.in_channels,
                transformer.cfg.out_channels()
            );
        }
        if transformer.takes_image() && expand_timesteps {
            bail!(
                "{}: transformer/config.json sets image_dim, which expand_timesteps models do not take",
                dir.display()
            );
        }
        if transformer.takes_image() && !image_to_video {
            bail!(
                "{}: transformer/config.json sets image_dim but the pipeline is WanPipeline (text to video)",
                dir.display()
            );
        }
        // Wan 2.1's image-to-video transformer attends to CLIP states of the picture; Wan 2.2's
        // takes the picture through the condition latents alone (diffusers skips the encoder).
        let image = match (image_to_video && !expand_timesteps, transformer.takes_image()) {
            (false, _) => None,
            (true, true) => {
                Some(ImageConditioning { clip: Some(load_image_conditioning(dir, &index, &transformer, device)?) })
            }
            (true, false) => Some(ImageConditioning { clip: None }),
        };
        let tokenizer = TextTokenizer::from_file(&dir.join("tokenizer").join("tokenizer.json"))?;
        let scheduler = scheduler::load(&dir.join("scheduler").join("scheduler_config.json"))?;
        let run = RunDefaults::read(dir)?;
        ensure!(
            run.knobs.is_empty(),
            "{}: `knobs` is not read for Wan folders (their knobs come from the experts' layout)",
            dir.join("fastvideo.json").display()
        );
        // The embedding cache key names the encoder's dtype too: bf16 and fp32 embeddings differ.
        let identity = format!("{}|{}", weights_identity(&e_dir), fastvideo_torch::kind_name(kind));
        let text_cache = Arc::new(fastvideo_pipeline::EmbeddingCache::new(identity, 512));
        let load_report = LoadReport {
            seconds: t0.elapsed().as_secs_f64(),
            host_peak_rss_bytes: fastvideo_layers::measure::host_peak_rss(),
            transformer_dtype: kind,
            text_encoder_dtype: kind,
            vae_dtype: vae_kind,
            precision: opts.precision,
            fp8_linears: opts.fp8_linears,
            int8_attention: opts.int8_attention,
            deferred_linear_bytes,
            quantized_weights,
            transformer_file: opts.transformer_file.clone(),
            device_budget: budget.map(|b| b.describe(t_cfg.num_layers as usize, text_encoder.cfg.num_layers as usize)),
        };
        tracing::info!(?load_report, dir = %dir.display(), "model loaded");
        Ok(Self {
            load_report,
            dir: dir.to_path_buf(),
            text_cache,
            tokenizer,
            text_encoder: Arc::new(text_encoder),
            transformer,
            offload,
            low_noise,
            vae: Arc::new(vae),
            tiny_vae,
            scheduler,
            run,
            device,
            parallel: None,
            image,
            expand_timesteps,
        })
    }

    /// Runs the transformer over the ranks of `plan` on `devices` (rank 0 = this model's device;
    /// `first` of [`ParallelPlan::devices`]). The other devices load the transformer's
    /// checkpoint; the text encoder and VAE stay on rank 0.
    pub fn parallelize(&mut self, plan: ParallelPlan, devices: Vec<Device>) -> Result<()> {
        if plan.is_single() {
            self.parallel = None;
            return Ok(());
        }
        if self.low_noise.is_some() {
            bail!(
                "{}: a two-expert model (Wan 2.2 A14B) runs on one GPU for now; --gpus {} is not supported with it",
                self.dir.display(),
                plan.ranks()
            );
        }
        ensure!(devices.first() == Some(&self.device), "rank 0 must be the model's device {:?}", self.device);
        let files = transformer_checkpoint(&self.dir)?;
        let load = load_from_files(&self.transformer, files, self.dir.join("transformer"));
        let p = ParallelTransformer::new(plan, devices, Arc::clone(&self.transformer), &load)?;
        self.parallel = Some(Arc::new(p));
        Ok(())
    }

    /// What requests to this model may ask for, with its defaults.
    pub fn limits(&self) -> ModelLimits {
        let t = &self.transformer.cfg;
        let tf = self.vae.cfg.temporal_factor() as u32;
        let sf = self.vae.cfg.spatial_factor() as u32;
        let spatial = sf * t.patch_size[1].max(t.patch_size[2]) as u32;
        let rope = t.rope_max_seq_len as u32;
        let r = &self.run;
        ModelLimits {
            family: "Wan".into(),
            tasks: if self.expand_timesteps {
                vec![TaskType::T2v, TaskType::T2i, TaskType::I2v]
            } else if self.image.is_some() {
                vec![TaskType::I2v]
            } else {
                vec![TaskType::T2v, TaskType::T2i, TaskType::V2v]
            },
            // A transformer with image positions for two pictures is first-and-last-frame.
            image_roles: match (&self.image, t.pos_embed_seq_len) {
                _ if self.expand_timesteps => vec![ImageRole::FirstFrame],
                (Some(ImageConditioning { clip: None }), _) => vec![ImageRole::FirstFrame],
                (None, _) => Vec::new(),
                (Some(_), None) => vec![ImageRole::FirstFrame],
                (Some(_), Some(_)) => vec![ImageRole::FirstFrame, ImageRole::LastFrame],
            },
            video: Some(VideoLimits { frame_multiple: tf, max_frames: tf * (rope * t.patch_size[0] as u32 - 1) + 1 }),
            picture: Some(PictureLimits { spatial_multiple: spatial, max_side: (spatial * rope).min(4096) }),
            audio: None,
            action: None,
            references: None,
            max_steps: 1000,
            defaults: Defaults {
                steps: r.steps.unwrap_or(50),
                guidance_scale: r.guidance_scale.unwrap_or(5.0),
                shift: self.scheduler.shift as f32,
                height: r.height.unwrap_or(480),
                width: r.width.unwrap_or(832),
                num_frames: r.num_frames.unwrap_or(81),
                fps: r.fps.unwrap_or(16),
                sampler: r.sampler.unwrap_or(self.scheduler.sampler),
                negative_prompt: r.negative_prompt.clone().unwrap_or_default(),
                timesteps: r.timesteps.clone(),
                knobs: crate::experts::knob_schema(
                    self.low_noise.as_ref().map(|e| (e.boundary_ratio, r.guidance_scale_2)),
                ),
            },
        }
    }

    /// Another handle to the same loaded components (nothing is copied): for building a second
    /// pipeline around them, e.g. with other transformer weights.
    pub fn share(&self) -> WanModel {
        WanModel {
            dir: self.dir.clone(),
            tokenizer: self.tokenizer.clone(),
            text_encoder: Arc::clone(&self.text_encoder),
            transformer: Arc::clone(&self.transformer),
            low_noise: self.low_noise.clone(),
            offload: self.offload.clone(),
            vae: Arc::clone(&self.vae),
            tiny_vae: self.tiny_vae.clone(),
            text_cache: Arc::clone(&self.text_cache),
            scheduler: self.scheduler.clone(),
            run: self.run.clone(),
            device: self.device,
            load_report: self.load_report.clone(),
            parallel: self.parallel.clone(),
            image: self.image.clone(),
            expand_timesteps: self.expand_timesteps,
        }
    }

    /// The transformers each step may run on, in expert order: `transformer`, then a two-expert
    /// model's low-noise `transformer_2`.
    pub fn experts(&self) -> Vec<Arc<WanTransformer3DModel>> {
        std::iter::once(&self.transformer).chain(self.low_noise.as_ref().map(|e| &e.transformer)).cloned().collect()
    }

    /// The text length prompts are padded or cut to: `fastvideo.json`'s, else diffusers' 512.
    pub fn max_sequence_length(&self) -> usize {
        self.run.max_sequence_length.unwrap_or(512)
    }
}

/// Whether a `model_index.json` component entry is absent in effect (`null` or `[null, null]`).
fn is_null_component(v: &Value) -> bool {
    v.is_null() || *v == Value::Array(vec![Value::Null, Value::Null])
}

/// The transformer with the load's lossy options applied (FP8 linears, 8-bit attention).
pub(crate) fn with_lossy_options(
    mut t: WanTransformer3DModel,
    fp8: bool,
    int8_attention: Option<fastvideo_torch::Int8Attention>,
) -> WanTransformer3DModel {
    if fp8 {
        t.quantize_fp8();
    }
    t.set_int8_attention(int8_attention);
    t
}

/// `transformer_2/`: the low-noise expert, in the first expert's dtype. Its config must agree
/// with the first's on everything the pipeline around them shares (channels, text and image
/// inputs, patching).
fn load_second_expert(dir: &Path, a: &TransformerConfig, device: Device, kind: Kind) -> Result<WanTransformer3DModel> {
    let t_dir = dir.join("transformer_2");
    let cfg_path = t_dir.join("config.json");
    let cfg = TransformerConfig::load(&cfg_path)?;
    for (key, ok) in [
        ("in_channels", cfg.in_channels == a.in_channels),
        ("out_channels", cfg.out_channels() == a.out_channels()),
        ("text_dim", cfg.text_dim == a.text_dim),
        ("image_dim", cfg.image_dim == a.image_dim),
        ("patch_size", cfg.patch_size == a.patch_size),
        ("pos_embed_seq_len", cfg.pos_embed_seq_len == a.pos_embed_seq_len),
    ] {
        ensure!(
            ok,
            "{}: `{key}` differs from transformer/config.json (the two experts must agree)",
            cfg_path.display()
        );
    }
    let w = Weights::from_dir(&t_dir, "diffusion_pytorch_model", device, kind)?;
    let t = WanTransformer3DModel::new(cfg, &w)?;
    w.warn_unused("transformer_2");
    Ok(t)
}

/// `image_encoder/` (a CLIP vision tower, float32 as diffusers' examples load it: one or two
/// pictures per request, so its cost is small) and `image_processor/`.
fn load_image_conditioning(
    dir: &Path,
    index: &serde_json::Map<String, Value>,
    transformer: &WanTransformer3DModel,
    device: Device,
) -> Result<ClipImage> {
    let index_path = dir.join("model_index.json");
    let class = component_class(dir, index, "image_encoder")?;
    if !matches!(class.as_str(), "CLIPVisionModel" | "CLIPVisionModelWithProjection") {
        return Err(unsupported(&index_path, "image_encoder", class, "only CLIPVisionModel"));
    }
    let class = component_class(dir, index, "image_processor")?;
    let Some(backend) = ProcessorBackend::of_class(&class) else {
        return Err(unsupported(&index_path, "image_processor", class, "only CLIPImageProcessor (Fast or Pil)"));
    };
    let e_dir = dir.join("image_encoder");
    let cfg = ClipVisionConfig::load(&e_dir.join("config.json"))?;
    if Some(cfg.hidden_size) != transformer.cfg.image_dim {
        bail!(
            "{}: image encoder hidden_size {} does not match transformer image_dim {:?}",
            dir.display(),
            cfg.hidden_size,
            transformer.cfg.image_dim
        );
    }
    let w = Weights::from_dir(&e_dir, "model", device, Kind::Float)?;
    let encoder = ClipVisionEncoder::new(cfg, &w)?;
    let mut processor = ImageProcessorConfig::load(&dir.join("image_processor").join("preprocessor_config.json"))?;
    processor.backend = backend;
    if processor.output_side().is_some_and(|s| s != encoder.cfg.image_size) {
        bail!(
            "{}: image_processor crops to {:?} but the image encoder takes {}x{}",
            dir.display(),
            processor.crop_size,
            encoder.cfg.image_size,
            encoder.cfg.image_size
        );
    }
    Ok(ClipImage { encoder: Arc::new(encoder), processor: Arc::new(processor) })
}

/// Names a folder's weights without reading them: each file's path, size and modification time.
fn weights_identity(dir: &Path) -> String {
    let mut parts = vec![dir.display().to_string()];
    if let Ok(entries) = std::fs::read_dir(dir) {
        let mut files: Vec<_> = entries.flatten().collect();
        files.sort_by_key(|e| e.file_name());
        for e in files {
            if let Ok(m) = e.metadata() {
                let mtime = m.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
                parts.push(format!("{}:{}:{:?}", e.file_name().to_string_lossy(), m.len(), mtime));
            }
        }
    }
    parts.join("|")
}
