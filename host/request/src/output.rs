use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A decoded video: `frames` RGB8 images of `height`x`width`, row-major, interleaved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VideoArtifact {
    pub fps: u32,
    pub num_frames: u32,
    pub height: u32,
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

/// Final latents in row-major f32.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatentsArtifact {
    pub shape: Vec<i64>,
    #[serde(skip)]
    pub data: Vec<f32>,
}

/// A named result of a request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Artifact {
    Video(VideoArtifact),
    Latents(LatentsArtifact),
}

/// Where a request's time went.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestMetrics {
    pub seed: u64,
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
    pub total_seconds: f64,
}

/// What a finished request returns, artifacts by name (`video`, `latents`, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OmniOutput {
    pub request_id: String,
    pub artifacts: BTreeMap<String, Artifact>,
    pub metrics: RequestMetrics,
}

impl OmniOutput {
    pub fn video(&self) -> Option<&VideoArtifact> {
        match self.artifacts.get("video") {
            Some(Artifact::Video(v)) => Some(v),
            _ => None,
        }
    }
}
