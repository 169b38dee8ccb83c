//! Action-conditioned generation (`policy`, `forward_dynamics`, `inverse_dynamics`): the
//! conditioning a request gives (named after diffusers' `CosmosActionCondition`), the rules a
//! model declares for it (its embodiment domains and their action widths, canvas tiers, camera
//! viewpoints), and the check of one against the other before any work. The canvas (the
//! request's height and width) comes from the conditioning picture's aspect ratio; the frame
//! count is `chunk_size + 1`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{InputImage, InputVideo, RequestError, TaskType};

/// What an action-conditioned request gives (`diffusion.action`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionCondition {
    /// The embodiment (`pusht`, `droid_lerobot`, ...): selects the action layers' weights and
    /// fixes the action width.
    pub domain_name: String,
    /// Action steps; the video spans `chunk_size + 1` frames.
    pub chunk_size: u32,
    /// The canvas tier (the model's default when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolution_tier: Option<u32>,
    /// The camera viewpoint the caption names (the model's default when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub view_point: Option<String>,
    /// `forward_dynamics`: the actions `[T][width]` that drive the video (shorter sequences
    /// repeat their last action, longer ones are cut to `chunk_size`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_actions: Option<Vec<Vec<f32>>>,
}

/// An embodiment a model knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionDomain {
    /// Which action weights it selects.
    pub id: u32,
    /// Its action width; `None` for domains the model cannot run inference for.
    pub width: Option<u32>,
}

/// One canvas of a tier: the aspect ratio (`height / width`) it serves and its size.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CanvasBin {
    /// `height / width` of the canvas this bin is chosen for.
    pub ratio: f64,
    /// Canvas height in pixels.
    pub height: u32,
    /// Canvas width in pixels.
    pub width: u32,
}

/// The action rules of a model that generates or follows actions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionLimits {
    /// The widest action it represents (narrower ones are zero-padded).
    pub action_dim: u32,
    /// Embodiments by name.
    pub domains: BTreeMap<String, ActionDomain>,
    /// Canvas bins per tier, in the reference's order (the first closest ratio wins).
    pub tiers: BTreeMap<u32, Vec<CanvasBin>>,
    /// The tier a request gets when it names none.
    pub default_tier: u32,
    /// Viewpoints the caption can name.
    pub view_points: Vec<String>,
    /// The viewpoint a request gets when it names none.
    pub default_view_point: String,
    /// Pictures are floored to multiples of this before their aspect is read; `chunk_size`
    /// must be a multiple of `frame_multiple`.
    pub spatial_multiple: u32,
    /// The VAE's temporal stride: `chunk_size + 1` frames must be `frame_multiple·k + 1`.
    pub frame_multiple: u32,
}

/// The checked conditioning.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResolvedAction {
    /// The embodiment's name.
    pub domain_name: String,
    /// Its weight id.
    pub domain_id: u32,
    /// Its action width.
    pub width: u32,
    /// Action steps.
    pub chunk_size: u32,
    /// The canvas tier.
    pub resolution_tier: u32,
    /// The caption's viewpoint.
    pub view_point: String,
    /// `forward_dynamics`: the given actions, each `width` wide.
    pub raw_actions: Option<Vec<Vec<f32>>>,
}

/// Whether `task` is an action task.
pub fn is_action_task(task: TaskType) -> bool {
    matches!(task, TaskType::Policy | TaskType::ForwardDynamics | TaskType::InverseDynamics)
}

fn err(field: &str, msg: impl Into<String>) -> RequestError {
    RequestError::new(format!("diffusion.action.{field}"), msg)
}

/// The closest bin to `height / width` (the first on ties), as diffusers'
/// `classify_height_width_bin`.
pub fn canvas(bins: &[CanvasBin], height: u32, width: u32) -> Option<(u32, u32)> {
    let ar = height as f64 / width as f64;
    let mut best: Option<&CanvasBin> = None;
    for b in bins {
        if best.is_none_or(|x| (b.ratio - ar).abs() < (x.ratio - ar).abs()) {
            best = Some(b);
        }
    }
    best.map(|b| (b.height, b.width))
}

impl ActionLimits {
    /// Checks `given` for `task` with its conditioning picture or video: the resolved
    /// conditioning and the canvas `(height, width)`.
    pub(crate) fn resolve(
        &self,
        task: TaskType,
        given: Option<&ActionCondition>,
        image: Option<&InputImage>,
        video: Option<&InputVideo>,
    ) -> Result<(ResolvedAction, (u32, u32)), RequestError> {
        let Some(a) = given else {
            return Err(RequestError::new(
                "diffusion.action",
                format!("`{}` needs the action condition (domain_name, chunk_size)", task.as_str()),
            ));
        };
        let Some(domain) = self.domains.get(&a.domain_name) else {
            let known: Vec<&str> = self.domains.keys().map(String::as_str).collect();
            return Err(err(
                "domain_name",
                format!("unknown embodiment `{}` (known: {})", a.domain_name, known.join(", ")),
            ));
        };
        let Some(width) = domain.width else {
            return Err(err(
                "domain_name",
                format!("`{}` has no fixed action width: not supported for inference", a.domain_name),
            ));
        };
        let fm = self.frame_multiple.max(1);
        if a.chunk_size == 0 || a.chunk_size % fm != 0 {
            return Err(err("chunk_size", format!("{}: must be a positive multiple of {fm}", a.chunk_size)));
        }
        let tier = a.resolution_tier.unwrap_or(self.default_tier);
        let Some(bins) = self.tiers.get(&tier) else {
            let known: Vec<String> = self.tiers.keys().map(u32::to_string).collect();
            return Err(err("resolution_tier", format!("{tier} is not a tier (known: {})", known.join(", "))));
        };
        let view_point = a.view_point.clone().unwrap_or_else(|| self.default_view_point.clone());
        if !self.view_points.contains(&view_point) {
            return Err(err(
                "view_point",
                format!("unknown viewpoint `{view_point}` (known: {})", self.view_points.join(", ")),
            ));
        }
        match (&a.raw_actions, task) {
            (None, TaskType::ForwardDynamics) => {
                return Err(err("raw_actions", "forward_dynamics needs the actions that drive the video"))
            }
            (Some(_), t) if t != TaskType::ForwardDynamics => {
                return Err(err("raw_actions", format!("only forward_dynamics takes actions, not `{}`", t.as_str())))
            }
            (Some(rows), _) => {
                if rows.is_empty() {
                    return Err(err("raw_actions", "no actions"));
                }
                if let Some((i, r)) = rows.iter().enumerate().find(|(_, r)| r.len() != width as usize) {
                    return Err(err(
                        &format!("raw_actions[{i}]"),
                        format!("{} values; `{}` actions are {width} wide", r.len(), a.domain_name),
                    ));
                }
                if rows.iter().flatten().any(|x| !x.is_finite()) {
                    return Err(err("raw_actions", "values must be finite"));
                }
            }
            (None, _) => {}
        }
        let (h, w) = match (image, video) {
            (Some(i), None) => (i.height, i.width),
            (None, Some(v)) => (v.height, v.width),
            (Some(_), Some(_)) => return Err(RequestError::new("inputs", "an image or a video, not both")),
            (None, None) => {
                return Err(RequestError::new("inputs", format!("`{}` needs an image or a video", task.as_str())))
            }
        };
        if task == TaskType::InverseDynamics && video.is_none() {
            return Err(RequestError::new("inputs", "inverse_dynamics needs a video (the frames the actions connect)"));
        }
        let m = self.spatial_multiple.max(1);
        let (fh, fw) = (h - h % m, w - w % m);
        if fh == 0 || fw == 0 {
            return Err(RequestError::new("inputs", format!("a {w}x{h} picture is smaller than {m}x{m}")));
        }
        let size = canvas(bins, fh, fw).expect("a tier has bins");
        let resolved = ResolvedAction {
            domain_name: a.domain_name.clone(),
            domain_id: domain.id,
            width,
            chunk_size: a.chunk_size,
            resolution_tier: tier,
            view_point,
            raw_actions: a.raw_actions.clone(),
        };
        Ok((resolved, size))
    }
}
