//! What a video job is, as clients see it and as the store keeps it: its status, its error and
//! OpenAI's `Video` object. Its own module so that the registry ([`crate::jobs`]) and the store
//! ([`crate::store`]) both build on it without needing each other.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// Where a video job is, as OpenAI's `Video.status` spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Admitted, waiting for the executor.
    Queued,
    /// Running: `progress` moves.
    InProgress,
    /// Finished; its content can be downloaded.
    Completed,
    /// Ended with an error (`error` says which).
    Failed,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobError {
    pub code: String,
    pub message: String,
}

fn video_object() -> &'static str {
    "video"
}

/// OpenAI's `Video` object plus our request echo.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VideoObject {
    /// The job's id (`video_…`).
    pub id: String,
    /// Always `video`.
    #[serde(skip_deserializing, default = "video_object")]
    pub object: &'static str,
    /// The model that runs it.
    pub model: String,
    /// Where it is.
    pub status: Status,
    /// Percent of its denoise steps done (100 once completed).
    pub progress: u32,
    /// Admission time, Unix seconds.
    pub created_at: u64,
    /// When it ended, Unix seconds.
    pub completed_at: Option<u64>,
    /// When its content will be deleted, Unix seconds, once it ended.
    pub expires_at: Option<u64>,
    /// The clip's length in seconds, as a string (OpenAI's type).
    pub seconds: String,
    /// `WIDTHxHEIGHT`.
    pub size: String,
    /// Why it failed, when it did.
    pub error: Option<JobError>,
    /// OpenAI's remix source: always absent (remixes are not supported).
    pub remixed_from_video_id: Option<String>,
    /// The prompt as the request gave it.
    pub prompt: String,
    /// The seed it runs with (drawn when the request gave none), so it can be repeated.
    pub seed: Option<u64>,
    /// Video frames of the clip.
    pub num_frames: u32,
    /// Frames per second of the clip (0 in records kept before the field existed).
    #[serde(default)]
    pub fps: u32,
    /// Samples per second of the clip's sound (the MP4's AAC track); null without sound.
    #[serde(default)]
    pub audio_sample_rate: Option<u32>,
    /// The engine's prediction of its run time, in seconds.
    pub predicted_seconds: f64,
    /// What the server noticed about the request before it ran (words of the prompt the text
    /// encoder does not know).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The prompt the model was given, when the request asked for `prompt_extend`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extended_prompt: Option<String>,
    /// The actions an action model predicted (policy, inverse dynamics), `[steps][width]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<Vec<Vec<f32>>>,
    /// Where the job's end is announced, and how that went; absent without a `webhook`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<crate::webhooks::WebhookStatus>,
}

impl Status {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Status::Queued => "queued",
            Status::InProgress => "in_progress",
            Status::Completed => "completed",
            Status::Failed => "failed",
        }
    }
}

impl VideoObject {
    /// A job just admitted: `num_frames` frames of `width`×`height` at `fps` (its `seconds` and
    /// `size` follow), queued; the caller adds what it knows more (prediction, webhook, warnings).
    pub(crate) fn queued(id: String, model: String, prompt: String, seed: u64, shape: [u32; 4]) -> Self {
        let [width, height, num_frames, fps] = shape;
        let seconds = num_frames as f64 / fps.max(1) as f64;
        VideoObject {
            id,
            object: "video",
            model,
            status: Status::Queued,
            progress: 0,
            created_at: now_secs(),
            completed_at: None,
            expires_at: None,
            seconds: format!("{}", (seconds * 100.0).round() / 100.0),
            size: format!("{width}x{height}"),
            error: None,
            remixed_from_video_id: None,
            prompt,
            seed: Some(seed),
            num_frames,
            fps,
            audio_sample_rate: None,
            predicted_seconds: seconds,
            webhook: None,
            warnings: Vec::new(),
            extended_prompt: None,
            action: None,
        }
    }

    pub(crate) fn ended(&self) -> bool {
        matches!(self.status, Status::Completed | Status::Failed)
    }
}

pub fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn video(id: &str) -> VideoObject {
        VideoObject {
            id: id.into(),
            object: "video",
            model: "m".into(),
            status: Status::Queued,
            progress: 0,
            created_at: 0,
            completed_at: None,
            expires_at: None,
            seconds: "2".into(),
            size: "64x64".into(),
            error: None,
            remixed_from_video_id: None,
            prompt: "p".into(),
            seed: None,
            num_frames: 17,
            fps: 8,
            audio_sample_rate: None,
            predicted_seconds: 0.0,
            webhook: None,
            warnings: Vec::new(),
            extended_prompt: None,
            action: None,
        }
    }
}
