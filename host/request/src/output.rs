use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A decoded video: `frames` RGB8 images of `height`x`width`, row-major, interleaved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VideoArtifact {
    /// Playback rate in frames per second (the request's `fps`).
    pub fps: u32,
    /// Frames in `rgb`.
    pub num_frames: u32,
    /// Frame height in pixels.
    pub height: u32,
    /// Frame width in pixels.
    pub width: u32,
    /// `num_frames * height * width * 3` bytes; not serialized (encode it as MP4/PNG instead).
    #[serde(skip)]
    pub rgb: Vec<u8>,
}

impl VideoArtifact {
    /// RGB bytes of frame `i`.
    pub fn frame(&self, i: usize) -> &[u8] {
        let n = (self.height * self.width * 3) as usize;
        &self.rgb[i * n..(i + 1) * n]
    }
}

/// A decoded waveform: `channels` interleaved f32 samples in [-1, 1] at `sample_rate`, as the
/// model made it (Cosmos3's is not cut to the video's length; the MP4 writer trims its track,
/// the WAV keeps it all).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AudioArtifact {
    /// Samples per second per channel.
    pub sample_rate: u32,
    /// Interleaved channels (2: left, right).
    pub channels: u16,
    /// `frames * channels` samples, frame by frame; not serialized (encode it as WAV or into
    /// the MP4 instead).
    #[serde(skip)]
    pub samples: Vec<f32>,
}

impl AudioArtifact {
    /// Sample frames (one sample per channel each).
    pub fn frames(&self) -> usize {
        self.samples.len() / self.channels.max(1) as usize
    }

    /// Length in seconds.
    pub fn seconds(&self) -> f64 {
        self.frames() as f64 / self.sample_rate.max(1) as f64
    }
}

/// Final latents in row-major f32.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatentsArtifact {
    /// Tensor dimensions, outermost first.
    pub shape: Vec<i64>,
    /// Row-major values, as many as the product of `shape`; not serialized.
    #[serde(skip)]
    pub data: Vec<f32>,
}

/// The denoising trajectory of a request (`outputs.return_trajectory`): what an RL trainer needs
/// to recompute each stochastic step's log-probability under its own weights.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrajectoryArtifact {
    /// Model time of each step, one per step.
    pub timesteps: Vec<f32>,
    /// Noise level at each step boundary, one more than steps (ends at 0).
    pub sigmas: Vec<f32>,
    /// The SDE noise scale `a` (0 for deterministic samplers).
    pub noise_level: f32,
    /// The stochastic steps, ascending.
    pub sde_steps: Vec<u32>,
    /// Log-probability of each stochastic step's sample under its Gaussian transition (mean over
    /// latent elements, as Flow-GRPO reports it), in `sde_steps` order.
    pub log_probs: Vec<f32>,
    /// Step boundaries whose latents are kept, ascending: `i` is the sample before step `i`
    /// (`steps` is the final one). For each stochastic step `i`, both `i` and `i + 1`.
    pub latent_steps: Vec<u32>,
    /// One latent's shape, e.g. `[1, C, F, H, W]`.
    pub latent_shape: Vec<i64>,
    /// The kept latents, row-major f32, `latent_steps.len()` of them back to back; not serialized.
    #[serde(skip)]
    pub latents: Vec<f32>,
}

/// A named result of a request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Artifact {
    /// Decoded RGB frames.
    Video(VideoArtifact),
    /// The clip's sound, named `audio`, when the request resolved `generate_sound`.
    Audio(AudioArtifact),
    /// Final latents, returned when the request set `outputs.return_latents`.
    Latents(LatentsArtifact),
    /// The denoising trajectory, returned when the request set `outputs.return_trajectory`.
    Trajectory(TrajectoryArtifact),
    /// Actions `[steps, width]`, named `action`: what an action model's policy or inverse
    /// dynamics predicts.
    Actions(LatentsArtifact),
}

/// Where a request's time went.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestMetrics {
    /// The seed the request ran with (the drawn one when the request gave none).
    pub seed: u64,
    /// Solver steps the request was resolved to.
    pub steps: u32,
    /// Wall time per pipeline node, in node order.
    pub node_seconds: Vec<(String, f64)>,
    /// Wall time of each denoise step.
    pub step_seconds: Vec<f64>,
    /// Transformer forwards run (2 per step with CFG).
    pub forwards: u32,
    /// Wall time spent inside plugin calls (guiders, caches, observers) for this request.
    #[serde(default)]
    pub plugin_seconds: f64,
    /// Wall time of the whole run, in seconds.
    pub total_seconds: f64,
    /// Which transformer weights the request ran with: 0 for the weights loaded at start, one
    /// more for each weight update since. A request runs on one epoch from its first step on.
    #[serde(default)]
    pub weight_epoch: u64,
}

/// What a finished request returns, artifacts by name (`video`, `latents`, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OmniOutput {
    /// Id of the request that produced it.
    pub request_id: String,
    /// Results by name, e.g. `video` or `latents`.
    pub artifacts: BTreeMap<String, Artifact>,
    /// Where the request's time went; the seed it ran with.
    pub metrics: RequestMetrics,
    /// Scores of the reward plugins the request named in `outputs.rewards`, by plugin name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rewards: BTreeMap<String, f32>,
    /// The prompt the model was given when the request asked for `prompt_extend`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extended_prompt: Option<String>,
}

impl OmniOutput {
    /// The artifact named `video`, if there is one and it is a video.
    pub fn video(&self) -> Option<&VideoArtifact> {
        match self.artifacts.get("video") {
            Some(Artifact::Video(v)) => Some(v),
            _ => None,
        }
    }

    /// The artifact named `audio`, if there is one and it is a waveform.
    pub fn audio(&self) -> Option<&AudioArtifact> {
        match self.artifacts.get("audio") {
            Some(Artifact::Audio(a)) => Some(a),
            _ => None,
        }
    }

    /// The artifact named `action`, if the model predicted actions.
    pub fn actions(&self) -> Option<&LatentsArtifact> {
        match self.artifacts.get("action") {
            Some(Artifact::Actions(a)) => Some(a),
            _ => None,
        }
    }

    /// The artifact named `trajectory`, if the request asked for it.
    pub fn trajectory(&self) -> Option<&TrajectoryArtifact> {
        match self.artifacts.get("trajectory") {
            Some(Artifact::Trajectory(t)) => Some(t),
            _ => None,
        }
    }
}
