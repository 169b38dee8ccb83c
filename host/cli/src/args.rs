//! Options shared by `generate` and `eval`: sampling overrides and plugins.

use std::path::PathBuf;

use clap::Args;
use fastvideo_request::{OmniRequest, SamplerKind};

/// Overrides of the model's sampling defaults.
#[derive(Args, Clone)]
pub struct SamplingArgs {
    /// Denoising steps (model default when omitted).
    #[arg(long)]
    pub steps: Option<u32>,
    /// Classifier-free guidance scale; 1 disables the unconditional branch.
    #[arg(long)]
    pub guidance: Option<f32>,
    /// Flow-matching timestep shift.
    #[arg(long)]
    pub shift: Option<f32>,
    /// euler, unipc or flow_sde (model default when omitted).
    #[arg(long, value_parser = parse_sampler)]
    pub sampler: Option<SamplerKind>,
    /// flow_sde: the SDE noise scale (0.7 when omitted).
    #[arg(long)]
    pub noise_level: Option<f32>,
    /// flow_sde: the stochastic steps, comma-separated from 0 (every step when omitted).
    #[arg(long, value_delimiter = ',')]
    pub sde_steps: Option<Vec<u32>>,
}

impl SamplingArgs {
    pub fn apply(&self, r: &mut OmniRequest) {
        r.sampling.sampler = self.sampler;
        r.sampling.noise_level = self.noise_level;
        r.sampling.sde_steps = self.sde_steps.clone();
        r.diffusion.num_inference_steps = self.steps;
        r.diffusion.guidance_scale = self.guidance;
        r.diffusion.shift = self.shift;
    }
}

pub fn parse_sampler(s: &str) -> Result<SamplerKind, String> {
    match s {
        "euler" => Ok(SamplerKind::Euler),
        "unipc" => Ok(SamplerKind::Unipc),
        "flow_sde" | "flow-sde" => Ok(SamplerKind::FlowSde),
        other => Err(format!("unknown sampler `{other}` (euler, unipc or flow_sde)")),
    }
}

/// `plugin.key` = JSON value (or a plain string).
pub type PluginParam = (String, String, serde_json::Value);

/// Which plugins run (a deploy config) and per-request parameters for them.
#[derive(Args, Clone)]
pub struct PluginArgs {
    /// Deploy config (TOML) whose plugins run (e.g. a guider replacing built-in CFG).
    #[arg(long)]
    pub deploy: Option<PathBuf>,
    /// A plugin parameter, `plugin.key=value` (value as JSON, else as a string); repeatable.
    #[arg(long = "plugin-param", value_parser = parse_plugin_param)]
    pub plugin_params: Vec<PluginParam>,
}

impl PluginArgs {
    pub fn apply(&self, r: &mut OmniRequest) {
        for (plugin, key, value) in &self.plugin_params {
            let entry = r.plugin_params.entry(plugin.clone()).or_insert_with(|| serde_json::json!({}));
            if let Some(m) = entry.as_object_mut() {
                m.insert(key.clone(), value.clone());
            }
        }
    }
}

pub fn parse_plugin_param(s: &str) -> Result<PluginParam, String> {
    let bad = || format!("`{s}`: expected plugin.key=value");
    let (lhs, value) = s.split_once('=').ok_or_else(bad)?;
    let (plugin, key) = lhs.split_once('.').ok_or_else(bad)?;
    if plugin.is_empty() || key.is_empty() {
        return Err(bad());
    }
    let v = serde_json::from_str(value).unwrap_or_else(|_| serde_json::Value::String(value.to_string()));
    Ok((plugin.to_string(), key.to_string(), v))
}

/// Compute dtypes and kernels, shared by every command that loads a model.
#[derive(Args, Clone)]
pub struct PrecisionArgs {
    /// Transformer and text-encoder dtype: auto (bf16 on CUDA, fp32 on CPU), bf16, fp16 or fp32.
    #[arg(long, default_value = "auto")]
    pub dtype: fastvideo_torch::Precision,
    /// VAE dtype: auto (measured best on CUDA, fp32 on CPU), bf16, fp16 or fp32.
    #[arg(long, default_value = "auto")]
    pub vae_dtype: fastvideo_torch::Precision,
    /// Fused CUDA kernels (`on`) or plain libtorch ops everywhere (`off`).
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    pub kernels: String,
}

impl PrecisionArgs {
    /// Applies `--kernels` and loads the model folder with these dtypes on `device`.
    pub fn load(&self, dir: &std::path::Path, device: tch::Device) -> anyhow::Result<fastvideo_wan::WanModel> {
        use anyhow::Context;
        if self.kernels == "off" {
            // Only ever switched off here, so `FASTVIDEO_NO_KERNELS` still holds with the default.
            fastvideo_kernels::set_enabled(false);
        }
        fastvideo_wan::WanModel::load_with(dir, self.options(device))
            .with_context(|| format!("--model {}", dir.display()))
    }

    /// The same for a world-model folder (the Wan folder plus `action_embedder/` and `world.json`).
    pub fn load_world(
        &self,
        dir: &std::path::Path,
        device: tch::Device,
    ) -> anyhow::Result<fastvideo_wan::world::WorldModel> {
        use anyhow::Context;
        if self.kernels == "off" {
            fastvideo_kernels::set_enabled(false);
        }
        fastvideo_wan::world::WorldModel::load(dir, self.options(device))
            .with_context(|| format!("--model {}", dir.display()))
    }

    fn options(&self, device: tch::Device) -> fastvideo_wan::LoadOptions {
        fastvideo_wan::LoadOptions { device, dtype: self.dtype, vae_dtype: self.vae_dtype }
    }
}

/// Several GPUs for one model: shared by `generate` and `serve`.
#[derive(Args, Clone)]
pub struct ParallelArgs {
    /// GPUs to split each denoising step over (rank 0 is --device, the others follow it).
    #[arg(long, default_value_t = 1)]
    pub gpus: usize,
    /// How the GPUs split a step: cfg (the two guidance branches side by side), sp (the token
    /// sequence, Ulysses) or cfg+sp.
    #[arg(long)]
    pub parallel: Option<fastvideo_parallel::ParallelMode>,
}

impl ParallelArgs {
    pub fn apply(&self, model: &mut fastvideo_wan::WanModel) -> anyhow::Result<()> {
        fastvideo_wan::parallel::setup(model, self.gpus, self.parallel)
    }
}

/// The clip shape a benchmark measures: Wan's default 480×832×81.
#[derive(Args, Clone, Copy)]
pub struct ShapeArgs {
    /// Frame count (4k+1) of the measured shape.
    #[arg(long, default_value_t = 81)]
    pub frames: i64,
    #[arg(long, default_value_t = 480)]
    pub height: i64,
    #[arg(long, default_value_t = 832)]
    pub width: i64,
}
