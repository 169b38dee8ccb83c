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
    /// Two-expert models (Wan 2.2 A14B): the low-noise expert's guidance scale (the model's,
    /// else --guidance, when omitted).
    #[arg(long = "guidance-2")]
    pub guidance_2: Option<f32>,
    /// Models that make sound with their picture (LTX-2): the audio stream's classifier-free
    /// guidance scale (the model's when omitted).
    #[arg(long = "audio-guidance")]
    pub audio_guidance: Option<f32>,
    /// Two-expert models: the high-noise expert runs while the timestep is at or above this
    /// fraction of 1000, in [0, 1] (the model's boundary_ratio when omitted).
    #[arg(long)]
    pub boundary_ratio: Option<f32>,
    /// Two-expert models: the low-noise expert from this step (0-based) on, instead of
    /// --boundary-ratio.
    #[arg(long)]
    pub switch_step: Option<u32>,
    /// A partial schedule's first step: start from the --noise latents as they are (no noise
    /// added).
    #[arg(long)]
    pub start_step: Option<u32>,
    /// A partial schedule's end: stop before this step, the latents keeping their leftover noise.
    #[arg(long)]
    pub end_step: Option<u32>,
    /// Flow-matching timestep shift.
    #[arg(long)]
    pub shift: Option<f32>,
    /// An explicit schedule: the training-grid points each step starts from, descending in
    /// (0, 1000], comma-separated (`1000,750,500,250` for a 4-step distilled model); the shift
    /// still applies. Sets the step count.
    #[arg(long, value_delimiter = ',', conflicts_with = "sigmas")]
    pub timesteps: Option<Vec<f64>>,
    /// --timesteps divided by 1000: the schedule as noise levels in (0, 1].
    #[arg(long, value_delimiter = ',')]
    pub sigmas: Option<Vec<f64>>,
    /// rcm: the initial noise level in TrigFlow's sigma (80 when omitted).
    #[arg(long)]
    pub sigma_max: Option<f64>,
    /// euler, unipc, flow_sde, dmd, rcm, euler_ancestral or gradient_estimation (model default when omitted).
    #[arg(long, value_parser = parse_sampler)]
    pub sampler: Option<SamplerKind>,
    /// flow_sde: the SDE noise scale (0.7 when omitted).
    #[arg(long)]
    pub noise_level: Option<f32>,
    /// flow_sde: the stochastic steps, comma-separated from 0 (every step when omitted).
    #[arg(long, value_delimiter = ',')]
    pub sde_steps: Option<Vec<u32>>,
    /// One of the model's own knobs, `name=value` (value as JSON, else a string), as the API's
    /// flat field of that name: LTX-2's `stg_scale=0`, `modality_scale=1`; repeatable. The
    /// model's knob schema checks it.
    #[arg(long = "knob", value_parser = parse_knob)]
    pub knobs: Vec<(String, serde_json::Value)>,
}

impl SamplingArgs {
    pub fn apply(&self, r: &mut OmniRequest) {
        r.sampling.sampler = self.sampler;
        r.sampling.noise_level = self.noise_level;
        r.sampling.sde_steps = self.sde_steps.clone();
        r.sampling.sigma_max = self.sigma_max;
        r.diffusion.num_inference_steps = self.steps;
        (r.diffusion.timesteps, r.diffusion.sigmas) = (self.timesteps.clone(), self.sigmas.clone());
        r.diffusion.guidance_scale = self.guidance;
        // Flat flags for Wan 2.2's expert knobs (the model's knob schema checks them).
        r.diffusion.set_knob("guidance_scale_2", self.guidance_2.map(fastvideo_request::number_f32));
        r.diffusion.set_knob("boundary_ratio", self.boundary_ratio.map(fastvideo_request::number_f32));
        r.diffusion.set_knob("switch_step", self.switch_step);
        r.diffusion.set_knob("audio_guidance_scale", self.audio_guidance.map(fastvideo_request::number_f32));
        (r.diffusion.start_step, r.diffusion.end_step) = (self.start_step, self.end_step);
        r.diffusion.shift = self.shift;
        for (k, v) in &self.knobs {
            r.diffusion.set_knob(k, Some(v.clone()));
        }
    }
}

/// `name=value` (value as JSON, else a string).
pub fn parse_knob(s: &str) -> Result<(String, serde_json::Value), String> {
    let (name, value) =
        s.split_once('=').filter(|(n, _)| !n.is_empty()).ok_or_else(|| format!("`{s}`: expected name=value"))?;
    let v = serde_json::from_str(value).unwrap_or_else(|_| serde_json::Value::String(value.to_string()));
    Ok((name.to_string(), v))
}

pub fn parse_sampler(s: &str) -> Result<SamplerKind, String> {
    match s {
        "euler" => Ok(SamplerKind::Euler),
        "unipc" => Ok(SamplerKind::Unipc),
        "flow_sde" | "flow-sde" => Ok(SamplerKind::FlowSde),
        "dmd" | "lcm" => Ok(SamplerKind::Dmd),
        "rcm" => Ok(SamplerKind::Rcm),
        "euler_ancestral" | "euler-ancestral" => Ok(SamplerKind::EulerAncestral),
        "gradient_estimation" | "gradient-estimation" => Ok(SamplerKind::GradientEstimation),
        other => Err(format!(
            "unknown sampler `{other}` (euler, unipc, flow_sde, dmd, rcm, euler_ancestral or gradient_estimation)"
        )),
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

pub use fastvideo_assembly::args::{ParallelArgs, PrecisionArgs};

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

/// The model a benchmark times, where, and at which shape (`bench`, `bench-lora`).
#[derive(Args)]
pub struct BenchModelArgs {
    /// Diffusers-layout Wan folder; the default model when omitted.
    #[arg(long)]
    pub model: Option<PathBuf>,
    #[arg(long, default_value = "auto")]
    pub device: String,
    #[command(flatten)]
    pub precision: PrecisionArgs,
    #[command(flatten)]
    pub shape: ShapeArgs,
}

impl BenchModelArgs {
    /// The generation model, loaded on the device through the registry.
    pub fn load(&self) -> anyhow::Result<Box<dyn fastvideo_assembly::LoadedModel>> {
        let device = fastvideo_torch::device(&self.device)?;
        let dir = match &self.model {
            Some(m) => m.clone(),
            None => fastvideo_assembly::default_model()?,
        };
        self.precision.load(&dir, fastvideo_assembly::ModelKind::Generation, device)
    }
}
