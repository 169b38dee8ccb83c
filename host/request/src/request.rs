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
    /// An image edited, or made from reference pictures, by text (a one-frame video).
    I2i,
    /// Video to video.
    V2v,
    /// A live world-model session: text and actions in, chunks of video out until it is
    /// closed (open-ended; actions also arrive while it runs).
    World,
    /// Text generation by a language model: the prompt in, tokens out (chat completions).
    Text,
    /// Actions and video from a first frame (an action model's policy).
    Policy,
    /// Video from a first frame and given actions.
    ForwardDynamics,
    /// The actions that connect a video's frames.
    InverseDynamics,
}

impl TaskType {
    /// The wire name (`t2v`, `i2v`, `t2i`, `v2v`, `world`), as it appears in JSON and in error messages.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskType::T2v => "t2v",
            TaskType::I2v => "i2v",
            TaskType::T2i => "t2i",
            TaskType::I2i => "i2i",
            TaskType::V2v => "v2v",
            TaskType::World => "world",
            TaskType::Text => "text",
            TaskType::Policy => "policy",
            TaskType::ForwardDynamics => "forward_dynamics",
            TaskType::InverseDynamics => "inverse_dynamics",
        }
    }
}

/// What a text part is for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TextRole {
    /// What to generate (the default when `role` is absent).
    #[default]
    Prompt,
    /// What to steer away from; used when `diffusion.negative_prompt` is absent.
    Negative,
}

/// One input of a request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum InputPart {
    /// Text: the prompt, or a negative prompt with `role: negative`.
    Text {
        /// The text; several parts of one role are joined by a space.
        text: String,
        /// What the text is for; a prompt when absent.
        #[serde(default)]
        role: TextRole,
    },
    /// A picture (PNG, JPEG or WebP) given as a file path or as base64 bytes (a `data:` URL is
    /// accepted too). Exactly one of the two.
    Image {
        /// Path of the image file (front ends that take files from users refuse this field).
        #[serde(default)]
        path: Option<String>,
        /// The PNG, JPEG or WebP bytes, base64-encoded.
        #[serde(default)]
        b64: Option<String>,
        /// Where the picture goes: the first frame (default) or the last (FLF2V models).
        #[serde(default)]
        role: crate::ImageRole,
    },
    /// A picture placed at a frame of the video with a strength (keyframe conditioning, LTX-2's
    /// condition pipeline), as a file path or base64 bytes like `image`. Models that cannot place
    /// a picture at a frame refuse it.
    Keyframe {
        /// Path of the image file.
        #[serde(default)]
        path: Option<String>,
        /// The PNG, JPEG or WebP bytes, base64-encoded.
        #[serde(default)]
        b64: Option<String>,
        /// The output frame (0-based) the picture is placed at.
        frame: u32,
        /// How strongly it holds, in `[0, 1]`; 1 when absent.
        #[serde(default = "crate::request::full_hold")]
        strength: f64,
    },
    /// A video (MP4 with an H.264 track) given as a file path or as base64 bytes (a `data:` URL
    /// is accepted too). Exactly one of the two.
    Video {
        /// Path of the video file (front ends that take files from users refuse this field).
        #[serde(default)]
        path: Option<String>,
        /// The MP4 bytes, base64-encoded.
        #[serde(default)]
        b64: Option<String>,
    },
    /// Controller actions for world models, as opaque JSON.
    Action {
        /// The actions, passed on uninterpreted.
        action: serde_json::Value,
    },
    /// Starting latents (shape, row-major f32 values).
    Latent {
        /// Which of the model's latents these are: `latents` (the default: the video or image
        /// latents) or another the model denoises beside them (Cosmos3: `sound_latents`,
        /// `action_latents`), named as the reference pipeline's call arguments.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// Tensor dimensions, outermost first.
        shape: Vec<i64>,
        /// Row-major values, as many as the product of `shape`.
        data: Vec<f32>,
    },
}

fn full_hold() -> f64 {
    1.0
}

/// Solver choice. `None` fields in the request take the model's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SamplerKind {
    /// Flow-matching Euler (diffusers `FlowMatchEulerDiscreteScheduler`).
    Euler,
    /// UniPC multistep, bh2, flow sigmas (diffusers `UniPCMultistepScheduler`; Wan's default).
    Unipc,
    /// Euler's schedule with stochastic (SDE) steps that report their log-probability: the
    /// Flow-GRPO sampler for RL rollouts (`sampling.noise_level`, `sampling.sde_steps`).
    FlowSde,
    /// Few-step distilled models (DMD, LCM, LightX2V): each step predicts the clean sample
    /// `x0 = x − σ·v` and noises it afresh to the next level, `(1 − σ')·x0 + σ'·ε` (diffusers
    /// `FlowMatchLCMScheduler`; ComfyUI's `lcm` sampler). Its noise is drawn from the seed.
    Dmd,
    /// rCM/sCM consistency sampling as TurboDiffusion runs its distilled Wan models: 1 to 4
    /// steps at TrigFlow times `atan(sigma_max)`, 1.5, 1.4, 1.0 (as many as steps), converted
    /// to flow levels `sin t / (sin t + cos t)`; the initial noise scaled by the first level, then
    /// `dmd` steps over those levels (no shift). `sampling.sigma_max`, 80 by default.
    Rcm,
    /// Euler ancestral for rectified flows, as ComfyUI's `euler_ancestral` runs on flow-matching
    /// models: an Euler step down to `σ'²/σ`, then fresh noise (from the seed) back up to `σ'`.
    EulerAncestral,
    /// ComfyUI's `gradient_estimation` (Permenter & Yuan, ICML 2024): Euler on the first step,
    /// then on `2·v − v_prev` (the velocity extrapolated from the last step's), no noise.
    GradientEstimation,
}

impl SamplerKind {
    /// Every solver, in the order docs list them.
    pub const ALL: [SamplerKind; 7] = [
        SamplerKind::Euler,
        SamplerKind::Unipc,
        SamplerKind::FlowSde,
        SamplerKind::Dmd,
        SamplerKind::Rcm,
        SamplerKind::EulerAncestral,
        SamplerKind::GradientEstimation,
    ];

    /// The wire name (`euler`, `unipc`), as it appears in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            SamplerKind::Euler => "euler",
            SamplerKind::Unipc => "unipc",
            SamplerKind::FlowSde => "flow_sde",
            SamplerKind::Dmd => "dmd",
            SamplerKind::Rcm => "rcm",
            SamplerKind::EulerAncestral => "euler_ancestral",
            SamplerKind::GradientEstimation => "gradient_estimation",
        }
    }
}

/// Randomness and solver.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SamplingParams {
    /// Seed of the initial noise; a random one is drawn (and reported in metrics) when absent.
    pub seed: Option<u64>,
    /// Solver; the model's default ([`Defaults::sampler`](crate::Defaults::sampler)) when absent.
    pub sampler: Option<SamplerKind>,
    /// `flow_sde` only: the SDE noise scale `a` in Flow-GRPO's `σ_t = a·√(σ/(1−σ))`; 0.7 when
    /// absent (Flow-GRPO's default), in `(0, 5]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise_level: Option<f32>,
    /// `flow_sde` only: the steps (0-based) that are stochastic and report a log-probability;
    /// the others are deterministic Euler steps. Every step when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sde_steps: Option<Vec<u32>>,
    /// `rcm` only: the initial noise level in TrigFlow's σ (its first time is `atan(sigma_max)`);
    /// 80 when absent (TurboDiffusion's Wan 2.1 default; its Wan 2.2 models use 200).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sigma_max: Option<f64>,
}

/// Denoising and shape parameters. Each one left out takes the model's [`Defaults`](crate::Defaults).
///
/// Any other field is one of the model's own knobs ([`knobs`](Self::knobs)); no
/// `deny_unknown_fields` here, because which names exist depends on the model: `resolve` refuses
/// one the model does not take, naming it and the ones it does.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DiffusionParams {
    /// Number of solver steps (each is one `LoopStage::step`).
    pub num_inference_steps: Option<u32>,
    /// Classifier-free guidance scale; 1.0 (or less) disables the unconditional branch.
    pub guidance_scale: Option<f32>,
    /// Flow-matching timestep shift.
    pub shift: Option<f32>,
    /// Output height in pixels; a multiple of the model's `spatial_multiple`. The server fills it
    /// from `height` or from OpenAI's `size` (`WIDTHxHEIGHT`).
    pub height: Option<u32>,
    /// Output width in pixels; a multiple of the model's `spatial_multiple`. The server fills it
    /// from `width` or from OpenAI's `size` (`WIDTHxHEIGHT`).
    pub width: Option<u32>,
    /// Frames to generate, `frame_multiple * k + 1`; ignored for `t2i` (always one frame). The
    /// server derives it from OpenAI's `seconds` when `num_frames` is not given.
    pub num_frames: Option<u32>,
    /// Frames per second of the output video, 1..=240.
    pub fps: Option<u32>,
    /// What to steer away from; takes precedence over negative text parts.
    pub negative_prompt: Option<String>,
    /// Video to video: how much of the schedule runs on the noised input, in `(0, 1]` (1 = from
    /// pure noise); 0.8 when absent (diffusers' default). Only for `v2v`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strength: Option<f64>,
    /// How image and video inputs of another aspect are fitted to the output: `stretch`
    /// (diffusers' default), `crop` or `pad`. Only for `i2v` and `v2v`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resize_mode: Option<crate::ResizeMode>,
    /// A partial schedule's first step (0-based): the request's `latent` input is then the
    /// partially denoised latents at that step, taken as they are (no noise is added: ComfyUI's
    /// `KSamplerAdvanced` with `add_noise` off). Not for `v2v` (its `strength` says where to
    /// start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_step: Option<u32>,
    /// An explicit schedule, the points of the training grid each step starts from, descending in
    /// `(0, 1000]` (`[1000, 750, 500, 250]`: a 4-step distilled model's list); the shift still
    /// applies, as diffusers' `set_timesteps(sigmas=t / 1000)`. Sets the step count. The model's
    /// list (`fastvideo.json`) when absent and it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timesteps: Option<Vec<f64>>,
    /// [`timesteps`](Self::timesteps) divided by 1000: the same schedule as noise levels in
    /// `(0, 1]`. One of the two at most.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sigmas: Option<Vec<f64>>,
    /// A partial schedule's end: the loop stops before this step and its latents keep their
    /// leftover noise (ComfyUI's `return_with_leftover_noise`); `num_inference_steps` when
    /// absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_step: Option<u32>,
    /// The precision preset the request expects (`exact`, `bf16` or `fast`): refused unless it
    /// is the one the server runs (a server never changes numerics silently); the server's when
    /// absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<String>,
    /// The action condition of `policy`, `forward_dynamics` and `inverse_dynamics`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<crate::ActionCondition>,
    /// The model's own knobs given (`diffusion.boundary_ratio`, ...: the names its
    /// [`KnobSchema`](crate::KnobSchema) declares), as sent; checked by `resolve`. A `null`
    /// counts as not given.
    #[serde(flatten)]
    pub knobs: BTreeMap<String, serde_json::Value>,
}

impl DiffusionParams {
    /// Sets knob `name` to `value` (a flat alias such as the CLI's `--boundary-ratio` lands here);
    /// `None` leaves it unset.
    pub fn set_knob(&mut self, name: &str, value: Option<impl Into<serde_json::Value>>) {
        if let Some(v) = value {
            self.knobs.insert(name.into(), v.into());
        }
    }
}

/// Output modality.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Modality {
    /// Decoded video frames.
    Video,
    /// A still image.
    Image,
    /// The final latents.
    Latents,
}

/// What to return and what to stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutputSpec {
    /// Modalities to return (`[video]` by default); an empty list is refused by `resolve`.
    pub modalities: Vec<Modality>,
    /// Emit a progress event per denoise step.
    pub stream_progress: bool,
    /// Also return the final latents as an artifact.
    pub return_latents: bool,
    /// Also return the denoising trajectory (`trajectory` artifact): the latents the sampler
    /// stepped from and to at each stochastic step (every step for deterministic samplers),
    /// the timesteps and sigmas, and each stochastic step's log-probability.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub return_trajectory: bool,
    /// Reward plugins (enabled by the deploy) to score the finished video with, by name; each
    /// score lands in [`OmniOutput::rewards`](crate::OmniOutput::rewards) and the event stream.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rewards: Vec<String>,
    /// A `preview` event (a small JPEG of the current estimate) every this many denoise steps,
    /// where the model has a preview; none: no previews.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview_every: Option<u32>,
    /// Also make the clip's sound (an `audio` artifact, muxed into the MP4); none: what the model
    /// does by default (sound when it makes any). `true` on a model without sound is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generate_sound: Option<bool>,
}

impl Default for OutputSpec {
    fn default() -> Self {
        Self {
            modalities: vec![Modality::Video],
            stream_progress: true,
            return_latents: false,
            return_trajectory: false,
            rewards: Vec::new(),
            preview_every: None,
            generate_sound: None,
        }
    }
}

/// One generation request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OmniRequest {
    /// Names the job in every event and in its output; must not be empty. The engine refuses a
    /// second live request with the same id.
    pub request_id: String,
    /// What to generate; must be one of the model's `ModelLimits::tasks`.
    pub task: TaskType,
    /// Prompt text and other conditioning; `t2v` takes text parts only. OpenAI's `prompt` becomes
    /// one text part.
    pub inputs: Vec<InputPart>,
    /// Seed and solver, each optional.
    #[serde(default)]
    pub sampling: SamplingParams,
    /// Steps, guidance and output shape, each optional.
    #[serde(default)]
    pub diffusion: DiffusionParams,
    /// What to return and stream; by default a video, with progress events.
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
    /// LoRA adapters (enabled by the deploy) to run with, each with its strength, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lora: Vec<crate::LoraChoice>,
    /// Which of the engine's models runs it, by id; none: the primary model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Rewrite the prompt with the model's prompt extender (a language model run as the
    /// `prompt_extend` node, its sampling in `node_params.prompt_extend`) before it is encoded;
    /// the output records the extended prompt.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub prompt_extend: bool,
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
            lora: Vec::new(),
            model: None,
            prompt_extend: false,
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
