use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The declared task. The pipeline branches on this, never on which inputs are present.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskType {
    /// Text to video.
    T2v,
    /// Image to video.
    I2v,
    /// Text to image (a one-frame video).
    T2i,
    /// Video to video.
    V2v,
}

impl TaskType {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskType::T2v => "t2v",
            TaskType::I2v => "i2v",
            TaskType::T2i => "t2i",
            TaskType::V2v => "v2v",
        }
    }
}

/// What a text part is for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TextRole {
    #[default]
    Prompt,
    Negative,
}

/// One input of a request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum InputPart {
    Text {
        text: String,
        #[serde(default)]
        role: TextRole,
    },
    /// An image given as a file path on the server or base64 PNG/JPEG bytes.
    Image {
        #[serde(default)]
        path: Option<String>,
        #[serde(default)]
        b64: Option<String>,
    },
    /// A video given as a file path.
    Video { path: String },
    /// Controller actions for world models, as opaque JSON.
    Action { action: serde_json::Value },
    /// Starting latents (shape, row-major f32 values).
    Latent { shape: Vec<i64>, data: Vec<f32> },
}

/// Solver choice. `None` fields in the request take the model's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SamplerKind {
    /// Flow-matching Euler (diffusers `FlowMatchEulerDiscreteScheduler`).
    Euler,
    /// UniPC multistep, bh2, flow sigmas (diffusers `UniPCMultistepScheduler`; Wan's default).
    Unipc,
}

impl SamplerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SamplerKind::Euler => "euler",
            SamplerKind::Unipc => "unipc",
        }
    }
}

/// Randomness and solver.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SamplingParams {
    /// Seed of the initial noise; a random one is drawn (and reported in metrics) when absent.
    pub seed: Option<u64>,
    pub sampler: Option<SamplerKind>,
}

/// Denoising and shape parameters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiffusionParams {
    /// Number of solver steps (each is one `LoopStage::step`).
    pub num_inference_steps: Option<u32>,
    /// Classifier-free guidance scale; 1.0 (or less) disables the unconditional branch.
    pub guidance_scale: Option<f32>,
    /// Flow-matching timestep shift.
    pub shift: Option<f32>,
    pub height: Option<u32>,
    pub width: Option<u32>,
    pub num_frames: Option<u32>,
    pub fps: Option<u32>,
    pub negative_prompt: Option<String>,
}

/// Output modality.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Modality {
    Video,
    Image,
    Latents,
}

/// What to return and what to stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutputSpec {
    pub modalities: Vec<Modality>,
    /// Emit a progress event per denoise step.
    pub stream_progress: bool,
    /// Also return the final latents as an artifact.
    pub return_latents: bool,
}

impl Default for OutputSpec {
    fn default() -> Self {
        Self { modalities: vec![Modality::Video], stream_progress: true, return_latents: false }
    }
}

/// One generation request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OmniRequest {
    pub request_id: String,
    pub task: TaskType,
    pub inputs: Vec<InputPart>,
    #[serde(default)]
    pub sampling: SamplingParams,
    #[serde(default)]
    pub diffusion: DiffusionParams,
    #[serde(default)]
    pub outputs: OutputSpec,
    /// Per-pipeline-node overrides, keyed by node name (e.g. `"vae_decode": {"tile": true}`).
    #[serde(default)]
    pub node_params: BTreeMap<String, serde_json::Value>,
    /// Parameters for plugins the deploy config enabled, keyed by plugin name.
    #[serde(default)]
    pub plugin_params: BTreeMap<String, serde_json::Value>,
    /// Exact mode: refuse anything that alters the sampled distribution.
    #[serde(default)]
    pub exact: bool,
    /// Higher runs first when the scheduler has a choice.
    #[serde(default)]
    pub priority: i32,
}

impl OmniRequest {
    /// A text-to-video request with model defaults for everything else.
    pub fn text_to_video(request_id: impl Into<String>, prompt: impl Into<String>) -> Self {
        Self {
            request_id: request_id.into(),
            task: TaskType::T2v,
            inputs: vec![InputPart::Text { text: prompt.into(), role: TextRole::Prompt }],
            sampling: SamplingParams::default(),
            diffusion: DiffusionParams::default(),
            outputs: OutputSpec::default(),
            node_params: BTreeMap::new(),
            plugin_params: BTreeMap::new(),
            exact: false,
            priority: 0,
        }
    }

    /// The prompt text parts joined by a space (there is usually exactly one).
    pub fn prompt(&self) -> Option<String> {
        self.texts(TextRole::Prompt)
    }

    /// Negative text: `diffusion.negative_prompt` wins over negative text parts.
    pub fn negative_prompt(&self) -> Option<String> {
        self.diffusion.negative_prompt.clone().or_else(|| self.texts(TextRole::Negative))
    }

    fn texts(&self, want: TextRole) -> Option<String> {
        let parts: Vec<&str> = self
            .inputs
            .iter()
            .filter_map(|p| match p {
                InputPart::Text { text, role } if *role == want => Some(text.as_str()),
                _ => None,
            })
            .collect();
        (!parts.is_empty()).then(|| parts.join(" "))
    }
}
