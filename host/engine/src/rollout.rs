//! Grouped rollouts for RL (`POST /v1/rollouts`, and in process through [`Engine::rollouts`]):
//! prompts × a group of K samples, each an ordinary request through the same step scheduler as
//! every other job — so the K samples of a prompt share one text encode (the embedding cache)
//! and their steps run as one batched forward where shapes allow.
//!
//! A sample is returned as soon as it finishes, with what the trainer needs: the final latents,
//! the trajectory (kept latents, timesteps, sigmas, per-step SDE log-probabilities), rewards,
//! and the weight epoch it ran on; [`RolloutSample::to_safetensors`] packs one as a safetensors
//! file.

use std::collections::{BTreeMap, HashMap};

use fastvideo_request::{
    Artifact, DiffusionParams, InputPart, Modality, OmniOutput, OmniRequest, OutputSpec, RequestError, SamplerKind,
    SamplingParams, TaskType, TextRole,
};
use safetensors::tensor::{Dtype, TensorView};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::{Engine, EngineError};

/// Most prompts in one rollout request.
pub const MAX_PROMPTS: usize = 256;
/// Most samples per prompt.
pub const MAX_GROUP: u32 = 64;

fn yes() -> bool {
    true
}
fn one() -> u32 {
    1
}

/// A rollout request: every prompt sampled `group_size` times with the same settings.
///
/// Its sampling and diffusion fields are the flat wire shape of `/v1/rollouts` (JSON, unknown
/// fields refused by name, which serde's `flatten` would lose); [`RolloutRequest::requests`]
/// maps them onto `OmniRequest`'s nested params in one place.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RolloutRequest {
    /// The prompts, 1 to [`MAX_PROMPTS`].
    pub prompts: Vec<String>,
    /// Samples per prompt (K), 1 to [`MAX_GROUP`].
    #[serde(default = "one")]
    pub group_size: u32,
    /// Seed of sample k of prompt p is `seed + p·K + k` (wrapping); a random base when absent.
    pub seed: Option<u64>,
    /// Solver; `flow_sde` (with log-probabilities) when absent.
    pub sampler: Option<SamplerKind>,
    /// `flow_sde`'s noise scale (0.7 when absent).
    pub noise_level: Option<f32>,
    /// `flow_sde`'s stochastic steps (every step when absent).
    pub sde_steps: Option<Vec<u32>>,
    /// Denoise steps per sample; the model's default when absent.
    pub num_inference_steps: Option<u32>,
    /// Classifier-free guidance scale; the model's default when absent.
    pub guidance_scale: Option<f32>,
    /// Two-expert models: where the low-noise expert takes over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boundary_ratio: Option<f32>,
    /// Two-expert models: the low-noise expert's guidance scale.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guidance_scale_2: Option<f32>,
    /// The flow schedule's shift; the model's default when absent.
    pub shift: Option<f32>,
    /// Output height in pixels; the model's default when absent.
    pub height: Option<u32>,
    /// Output width in pixels; the model's default when absent.
    pub width: Option<u32>,
    /// Video frames per sample; the model's default when absent.
    pub num_frames: Option<u32>,
    /// What guidance steers away from; the model's default when absent.
    pub negative_prompt: Option<String>,
    /// Reward plugins to score every sample with.
    #[serde(default)]
    pub rewards: Vec<String>,
    /// Return the decoded video (uint8 `[F, H, W, 3]`); off by default.
    #[serde(default)]
    pub return_video: bool,
    /// Return the final latents; on by default.
    #[serde(default = "yes")]
    pub return_latents: bool,
    /// Return the trajectory; on by default.
    #[serde(default = "yes")]
    pub return_trajectory: bool,
    /// Parameters for the model's plugins, by plugin name, as in a generation request.
    #[serde(default)]
    pub plugin_params: BTreeMap<String, serde_json::Value>,
    /// Scheduling priority of every sample (higher runs first), as in a generation request.
    #[serde(default)]
    pub priority: i32,
    /// LoRA adapters every sample runs with (`[{"name": ..., "scale": ...}]`).
    #[serde(default)]
    pub lora: Vec<fastvideo_request::LoraChoice>,
    /// HTTP only: `zstd` compresses each sample's safetensors.
    pub compress: Option<String>,
}

impl RolloutRequest {
    /// The requests of the rollout, prompt-major: `(prompt index, group index, request)`.
    pub fn requests(&self, id_prefix: &str, base_seed: u64) -> Result<Vec<(usize, u32, OmniRequest)>, RequestError> {
        if self.prompts.is_empty() || self.prompts.len() > MAX_PROMPTS {
            return Err(RequestError::new("prompts", format!("give 1 to {MAX_PROMPTS} prompts")));
        }
        if let Some(i) = self.prompts.iter().position(|p| p.trim().is_empty()) {
            return Err(RequestError::new(format!("prompts[{i}]"), "must not be empty"));
        }
        if !(1..=MAX_GROUP).contains(&self.group_size) {
            return Err(RequestError::new("group_size", format!("{} is outside 1..={MAX_GROUP}", self.group_size)));
        }
        let k = self.group_size as u64;
        let mut out = Vec::new();
        for (p, prompt) in self.prompts.iter().enumerate() {
            for g in 0..self.group_size {
                let seed = base_seed.wrapping_add(p as u64 * k + g as u64);
                let req = OmniRequest {
                    request_id: format!("{id_prefix}_p{p}_k{g}"),
                    task: TaskType::T2v,
                    inputs: vec![InputPart::Text { text: prompt.clone(), role: TextRole::Prompt }],
                    sampling: SamplingParams {
                        seed: Some(seed),
                        sampler: Some(self.sampler.unwrap_or(SamplerKind::FlowSde)),
                        noise_level: self.noise_level,
                        sde_steps: self.sde_steps.clone(),
                        sigma_max: None,
                    },
                    diffusion: DiffusionParams {
                        // Two-expert models' flat fields, as the knobs the model's schema checks.
                        knobs: [
                            ("boundary_ratio", self.boundary_ratio.map(fastvideo_request::number_f32)),
                            ("guidance_scale_2", self.guidance_scale_2.map(fastvideo_request::number_f32)),
                        ]
                        .into_iter()
                        .filter_map(|(k, v)| Some((k.to_string(), v?)))
                        .collect(),
                        num_inference_steps: self.num_inference_steps,
                        guidance_scale: self.guidance_scale,
                        shift: self.shift,
                        height: self.height,
                        width: self.width,
                        num_frames: self.num_frames,
                        fps: None,
                        strength: None,
                        resize_mode: None,
                        start_step: None,
                        end_step: None,
                        timesteps: None,
                        sigmas: None,
                        precision: None,
                        action: None,
                        negative_prompt: self.negative_prompt.clone(),
                    },
                    outputs: OutputSpec {
                        modalities: vec![Modality::Video],
                        stream_progress: false,
                        return_latents: self.return_latents,
                        return_trajectory: self.return_trajectory,
                        rewards: self.rewards.clone(),
                        preview_every: None,
                        generate_sound: None,
                    },
                    node_params: BTreeMap::new(),
                    plugin_params: self.plugin_params.clone(),
                    exact: false,
                    priority: self.priority,
                    lora: self.lora.clone(),
                    model: None,
                    prompt_extend: false,
                };
                out.push((p, g, req));
            }
        }
        Ok(out)
    }
}

/// One finished sample of a rollout.
#[derive(Debug, Clone)]
pub struct RolloutSample {
    /// Index of its prompt in the request.
    pub prompt_index: usize,
    /// Its index within the prompt's group (0..K).
    pub group_index: u32,
    /// The prompt it was generated from.
    pub prompt: String,
    /// The seed it ran with, so a trainer can reproduce it.
    pub seed: u64,
    /// Artifacts (`latents`, `trajectory`, `video`), rewards, metrics (with the weight epoch).
    pub output: OmniOutput,
}

/// A sample that failed, and why; the rest of the rollout goes on.
#[derive(Debug, Clone)]
pub struct RolloutFailure {
    /// Index of its prompt in the request.
    pub prompt_index: usize,
    /// Its index within the prompt's group (0..K).
    pub group_index: u32,
    /// The seed it ran with.
    pub seed: u64,
    /// Why it failed.
    pub error: EngineError,
}

/// The samples of an admitted rollout, as they finish.
pub struct Rollout {
    /// Samples in the rollout (prompts × K).
    pub total: usize,
    /// The samples' request ids, prompt-major (for cancelling what has not finished).
    pub request_ids: Vec<String>,
    /// Each sample or failure as it finishes, in no fixed order; closed after the last.
    pub samples: mpsc::UnboundedReceiver<Result<RolloutSample, RolloutFailure>>,
}

impl Engine {
    /// Admits every sample of `r` (all or nothing: a refusal cancels those already admitted)
    /// and returns them as they finish. Needs a tokio runtime.
    pub fn rollouts(&self, r: &RolloutRequest, id_prefix: &str, base_seed: u64) -> Result<Rollout, EngineError> {
        let reqs = r.requests(id_prefix, r.seed.unwrap_or(base_seed))?;
        let mut handles = Vec::with_capacity(reqs.len());
        for (p, g, req) in reqs {
            let seed = req.sampling.seed.unwrap_or_default();
            match self.submit(req) {
                Ok(h) => handles.push((p, g, seed, h)),
                Err(e) => {
                    for (_, _, _, h) in &handles {
                        self.cancel(&h.request_id);
                    }
                    return Err(e);
                }
            }
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let total = handles.len();
        let request_ids = handles.iter().map(|(_, _, _, h)| h.request_id.clone()).collect();
        for (p, g, seed, h) in handles {
            let (tx, prompt) = (tx.clone(), r.prompts[p].clone());
            tokio::spawn(async move {
                let item = match h.wait().await {
                    Ok(output) => Ok(RolloutSample { prompt_index: p, group_index: g, prompt, seed, output }),
                    Err(error) => Err(RolloutFailure { prompt_index: p, group_index: g, seed, error }),
                };
                let _ = tx.send(item);
            });
        }
        Ok(Rollout { total, request_ids, samples: rx })
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
fn i64_bytes(v: impl IntoIterator<Item = i64>) -> Vec<u8> {
    v.into_iter().flat_map(|x| x.to_le_bytes()).collect()
}

impl RolloutSample {
    /// The sample as a safetensors file. Tensors: `latents` (final, f32), `video` (u8
    /// `[F, H, W, 3]`), `trajectory.latents` (f32 `[L, …latent shape]`), `trajectory.latent_steps`
    /// (i64 `[L]`), `trajectory.timesteps`, `trajectory.sigmas`, `trajectory.log_probs` (f32),
    /// `trajectory.sde_steps` (i64), as far as returned. Metadata: `prompt`, `prompt_index`,
    /// `group_index`, `seed`, `request_id`, `weight_epoch`, `noise_level`, `rewards` (JSON).
    pub fn to_safetensors(&self) -> Result<Vec<u8>, safetensors::SafeTensorError> {
        let mut bufs: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
        let mut meta = HashMap::from([
            ("prompt".to_string(), self.prompt.clone()),
            ("prompt_index".to_string(), self.prompt_index.to_string()),
            ("group_index".to_string(), self.group_index.to_string()),
            ("seed".to_string(), self.seed.to_string()),
            ("request_id".to_string(), self.output.request_id.clone()),
            ("weight_epoch".to_string(), self.output.metrics.weight_epoch.to_string()),
            ("rewards".to_string(), serde_json::to_string(&self.output.rewards).unwrap_or_default()),
        ]);
        for (name, a) in &self.output.artifacts {
            match a {
                Artifact::Latents(l) => {
                    let shape = l.shape.iter().map(|&d| d as usize).collect();
                    bufs.push(("latents".into(), Dtype::F32, shape, f32_bytes(&l.data)));
                }
                Artifact::Actions(a) => {
                    let shape = a.shape.iter().map(|&d| d as usize).collect();
                    bufs.push(("action".into(), Dtype::F32, shape, f32_bytes(&a.data)));
                }
                Artifact::Video(v) if name == "video" => {
                    let shape = vec![v.num_frames as usize, v.height as usize, v.width as usize, 3];
                    bufs.push(("video".into(), Dtype::U8, shape, v.rgb.clone()));
                }
                Artifact::Trajectory(t) => {
                    meta.insert("noise_level".into(), t.noise_level.to_string());
                    let mut shape = vec![t.latent_steps.len()];
                    shape.extend(t.latent_shape.iter().map(|&d| d as usize));
                    bufs.push(("trajectory.latents".into(), Dtype::F32, shape, f32_bytes(&t.latents)));
                    let steps = t.latent_steps.iter().map(|&s| s as i64);
                    bufs.push((
                        "trajectory.latent_steps".into(),
                        Dtype::I64,
                        vec![t.latent_steps.len()],
                        i64_bytes(steps),
                    ));
                    bufs.push((
                        "trajectory.timesteps".into(),
                        Dtype::F32,
                        vec![t.timesteps.len()],
                        f32_bytes(&t.timesteps),
                    ));
                    bufs.push(("trajectory.sigmas".into(), Dtype::F32, vec![t.sigmas.len()], f32_bytes(&t.sigmas)));
                    bufs.push((
                        "trajectory.log_probs".into(),
                        Dtype::F32,
                        vec![t.log_probs.len()],
                        f32_bytes(&t.log_probs),
                    ));
                    let sde = t.sde_steps.iter().map(|&s| s as i64);
                    bufs.push(("trajectory.sde_steps".into(), Dtype::I64, vec![t.sde_steps.len()], i64_bytes(sde)));
                }
                _ => {}
            }
        }
        let views = bufs
            .iter()
            .map(|(n, d, s, b)| TensorView::new(*d, s.clone(), b).map(|v| (n.clone(), v)))
            .collect::<Result<Vec<_>, _>>()?;
        safetensors::tensor::serialize(views, Some(meta))
    }
}
