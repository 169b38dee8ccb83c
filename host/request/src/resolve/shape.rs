//! The output's shape: the picture and frame rules a model declares, each only where the model
//! has one (an image model makes no frames, a language model neither frames nor pictures), and a
//! request's size and frame count checked against them.

use serde::{Deserialize, Serialize};

use crate::{DiffusionParams, InputVideo, ModelLimits, RequestError, TaskType};

/// The frame rule of a model that makes video.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct VideoLimits {
    /// Frames must equal `frame_multiple * k + 1` (Wan: 4, from the VAE's 4x temporal stride).
    pub frame_multiple: u32,
    /// Most frames a request may ask for.
    pub max_frames: u32,
}

/// The size rule of a model that makes pictures (a video's frames are pictures too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PictureLimits {
    /// Height and width must be multiples of this (Wan: 16 = VAE stride 8 x patch 2).
    pub spatial_multiple: u32,
    /// Largest height or width, in pixels.
    pub max_side: u32,
}

/// Whether `task` makes a video with a frame count the request picks (a world session's chunks
/// come as it runs; it picks none).
fn is_video_task(task: TaskType) -> bool {
    matches!(task, TaskType::T2v | TaskType::I2v | TaskType::V2v)
}

impl ModelLimits {
    /// Refuses a video task of a model without a frame rule (a family's declaration error, kept
    /// from reaching a pipeline that cannot count frames).
    pub(super) fn check_video_task(&self, task: TaskType) -> Result<(), RequestError> {
        if is_video_task(task) && self.video.is_none() {
            return Err(RequestError::new(
                "task",
                format!("`{}` makes video; {} makes no video", task.as_str(), self.family),
            ));
        }
        Ok(())
    }

    /// `(height, width)`: the request's or the defaults, checked against the picture rule; `(0, 0)`
    /// for a model without one, which refuses a size given.
    pub(super) fn resolve_size(&self, d: &DiffusionParams) -> Result<(u32, u32), RequestError> {
        let Some(p) = &self.picture else {
            for (name, given) in [("diffusion.height", d.height), ("diffusion.width", d.width)] {
                if let Some(v) = given {
                    return Err(RequestError::new(name, format!("{v}: {} makes no pictures", self.family)));
                }
            }
            return Ok((0, 0));
        };
        let m = p.spatial_multiple;
        let height = d.height.unwrap_or(self.defaults.height);
        let width = d.width.unwrap_or(self.defaults.width);
        for (name, v) in [("diffusion.height", height), ("diffusion.width", width)] {
            if v == 0 || v % m != 0 || v > p.max_side {
                return Err(RequestError::new(
                    name,
                    format!("{v}: {} needs a positive multiple of {m} up to {}", self.family, p.max_side),
                ));
            }
        }
        Ok((height, width))
    }

    /// The frame count: 1 for `t2i`, else the request's, the input video's usable frames or the
    /// default, checked against the frame rule. A model without one makes one picture (1) or
    /// none (0), and refuses any other count given.
    pub(super) fn resolve_frames(
        &self,
        d: &DiffusionParams,
        task: TaskType,
        video: Option<&InputVideo>,
    ) -> Result<u32, RequestError> {
        let Some(v) = &self.video else {
            if let Some(n) = d.num_frames.filter(|&n| n != 1) {
                return Err(RequestError::new(
                    "diffusion.num_frames",
                    format!("{n}: {} makes no video (one picture a request)", self.family),
                ));
            }
            return Ok(self.picture.is_some() as u32);
        };
        let fm = v.frame_multiple;
        let num_frames = match (video, task) {
            (_, TaskType::T2i | TaskType::I2i) => 1,
            // Video to video: every frame that fills the VAE's chunks (as diffusers' encoder
            // reads them), within the model's limit, unless the request asks for fewer.
            (Some(input), _) => {
                let usable = ((input.frames - 1) / fm * fm + 1).min(v.max_frames);
                match d.num_frames {
                    Some(n) if n > usable => {
                        return Err(RequestError::new(
                            "diffusion.num_frames",
                            format!("{n}: the input video gives {usable} usable frames (of {})", input.frames),
                        ))
                    }
                    Some(n) => n,
                    None => usable,
                }
            }
            (None, _) => d.num_frames.unwrap_or(self.defaults.num_frames),
        };
        if num_frames == 0 || (num_frames - 1) % fm != 0 || num_frames > v.max_frames {
            // Suggest the valid counts either side, but never one above the limit.
            let top = (v.max_frames.saturating_sub(1) / fm) * fm + 1;
            let k = num_frames.saturating_sub(1) / fm;
            let (lo, hi) =
                (fm.saturating_mul(k).saturating_add(1).min(top), fm.saturating_mul(k + 1).saturating_add(1));
            let hint = if num_frames > top || hi > top { format!("e.g. {top}") } else { format!("e.g. {lo} or {hi}") };
            return Err(RequestError::new(
                "diffusion.num_frames",
                format!("{num_frames}: {} needs frames = {fm}k+1 up to {} ({hint})", self.family, v.max_frames),
            ));
        }
        Ok(num_frames)
    }
}
