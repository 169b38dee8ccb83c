//! `generate`'s action flags: the action condition of an action model's tasks (policy, forward
//! and inverse dynamics), named after the fields of diffusers' `CosmosActionCondition`, and where
//! the predicted actions go.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use fastvideo_request::{ActionCondition, OmniOutput, OmniRequest, TaskType};

#[derive(Args, Default)]
pub struct ActionArgs {
    /// The task, where the inputs do not say it: t2v, i2v, t2i, v2v, policy, forward_dynamics
    /// or inverse_dynamics. With action flags: forward_dynamics when --actions is given,
    /// inverse_dynamics with --video, else policy.
    #[arg(long)]
    task: Option<String>,
    /// Action tasks: the embodiment (e.g. pusht, droid_lerobot); it fixes the action width.
    #[arg(long)]
    action_domain: Option<String>,
    /// Action tasks: action steps; the video spans this + 1 frames.
    #[arg(long)]
    action_chunk_size: Option<u32>,
    /// Action tasks: the canvas tier (256, 480, 704 or 720; the model's default when omitted).
    #[arg(long)]
    action_resolution_tier: Option<u32>,
    /// Action tasks: the camera viewpoint the caption names (ego_view, third_person_view,
    /// wrist_view, concat_view).
    #[arg(long)]
    action_view_point: Option<String>,
    /// Forward dynamics: safetensors with the actions `[T, width]` under the key `action`.
    #[arg(long)]
    actions: Option<PathBuf>,
    /// Write the predicted actions (policy, inverse dynamics) as safetensors, key `action`.
    #[arg(long)]
    actions_out: Option<PathBuf>,
}

fn parse_task(s: &str) -> Result<TaskType> {
    serde_json::from_value(serde_json::Value::String(s.into())).map_err(|_| {
        anyhow::anyhow!("--task: `{s}` is not t2v, i2v, t2i, v2v, policy, forward_dynamics or inverse_dynamics")
    })
}

/// Rows of the `action` tensor of `path`.
fn read_actions(path: &Path) -> Result<Vec<Vec<f32>>> {
    let tensors = tch::Tensor::read_safetensors(path)
        .map_err(|e| anyhow::anyhow!("--actions: cannot read {} as safetensors: {e}", path.display()))?;
    let Some((_, t)) = tensors.into_iter().find(|(n, _)| n == "action") else {
        bail!("--actions: {} has no tensor named `action`", path.display());
    };
    if t.dim() != 2 {
        bail!("--actions: `action` in {} is {:?}; it must be [steps, width]", path.display(), t.size());
    }
    Ok(Vec::<Vec<f32>>::try_from(t.to_kind(tch::Kind::Float))?)
}

impl ActionArgs {
    /// Whether any action flag is given.
    fn any(&self) -> bool {
        self.action_domain.is_some()
            || self.action_chunk_size.is_some()
            || self.action_resolution_tier.is_some()
            || self.action_view_point.is_some()
            || self.actions.is_some()
    }

    /// Sets the task and the action condition on `r` (`has_video`: --video was given).
    pub fn apply(&self, r: &mut OmniRequest, has_video: bool) -> Result<()> {
        if let Some(t) = &self.task {
            r.task = parse_task(t)?;
        }
        if !self.any() {
            if fastvideo_request::is_action_task(r.task) {
                bail!("--task {}: give the action condition (--action-domain, --action-chunk-size)", r.task.as_str());
            }
            return Ok(());
        }
        if self.task.is_none() {
            r.task = match (&self.actions, has_video) {
                (Some(_), _) => TaskType::ForwardDynamics,
                (None, true) => TaskType::InverseDynamics,
                (None, false) => TaskType::Policy,
            };
        }
        if !fastvideo_request::is_action_task(r.task) {
            bail!(
                "the --action-* flags apply to policy, forward_dynamics and inverse_dynamics, not --task {}",
                r.task.as_str()
            );
        }
        r.diffusion.action = Some(ActionCondition {
            domain_name: self.action_domain.clone().context("--action-domain: action tasks need the embodiment")?,
            chunk_size: self.action_chunk_size.context("--action-chunk-size: action tasks need the action steps")?,
            resolution_tier: self.action_resolution_tier,
            view_point: self.action_view_point.clone(),
            raw_actions: self.actions.as_deref().map(read_actions).transpose()?,
        });
        Ok(())
    }

    /// Checks `--actions-out` before any work: a file name, and a task that predicts actions.
    pub fn check(&self, has_video: bool) -> Result<()> {
        let Some(p) = &self.actions_out else { return Ok(()) };
        crate::output_path::check_output(p, "--actions-out", "actions.safetensors")?;
        let mut r = OmniRequest::text_to_video("check", "check");
        self.apply(&mut r, has_video)?;
        if !matches!(r.task, TaskType::Policy | TaskType::InverseDynamics) {
            bail!("--actions-out: `{}` predicts no actions (policy and inverse_dynamics do)", r.task.as_str());
        }
        Ok(())
    }

    /// Writes the predicted actions where `--actions-out` says.
    pub fn write(&self, out: &OmniOutput) -> Result<()> {
        let Some(path) = &self.actions_out else { return Ok(()) };
        let a =
            out.actions().context("--actions-out: this task predicts no actions (policy and inverse_dynamics do)")?;
        let t = tch::Tensor::from_slice(&a.data).view(a.shape.as_slice());
        tch::Tensor::write_safetensors(&[("action", &t)], path)
            .with_context(|| format!("--actions-out {}", path.display()))
    }
}
