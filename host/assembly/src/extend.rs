//! The prompt extender of a video model: the rewriter a request with `prompt_extend` runs
//! before its text encoder (`fastvideo_qwen::extend`). It comes from `--prompt-extender DIR`
//! (`model.prompt_extender`), else from the model folder's own `prompt_extender/` (the shipped
//! default model has one, trained to map free-form words onto its vocabulary).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use fastvideo_pipeline::LoopPolicies;
use fastvideo_qwen::extend::EXTEND_NODE;
use fastvideo_qwen::PromptExtender;
use fastvideo_request::{RequestError, ResolvedRequest};
use tch::{Device, Kind};

use crate::config::ModelConfig;

/// The folder inside a model folder that holds its rewriter.
pub const EXTENDER_FOLDER: &str = "prompt_extender";

impl ModelConfig {
    /// The rewriter folder for the model at `model_dir`, if it has one.
    pub fn extender_dir(&self, model_dir: &Path) -> Option<PathBuf> {
        match &self.prompt_extender {
            Some(p) => Some(p.clone()),
            None => Some(model_dir.join(EXTENDER_FOLDER)).filter(|p| p.is_dir()),
        }
    }

    /// Loads the rewriter of the model at `model_dir` (none when it has none); errors name the
    /// flag or the folder.
    pub fn load_extender(&self, model_dir: &Path, device: Device) -> Result<Option<Arc<PromptExtender>>> {
        let Some(dir) = self.extender_dir(model_dir) else { return Ok(None) };
        let kind = if device.is_cuda() { Kind::BFloat16 } else { Kind::Float };
        let what = match &self.prompt_extender {
            Some(_) => format!("model.prompt_extender (--prompt-extender) {}", dir.display()),
            None => format!("the model's prompt extender {}", dir.display()),
        };
        Ok(Some(Arc::new(PromptExtender::load(&dir, device, kind).with_context(|| what)?)))
    }
}

/// `policies` with the rewriter's nodes before the text encoder (unchanged without one).
pub fn with_extender(mut policies: LoopPolicies, extender: Option<&PromptExtender>) -> LoopPolicies {
    if let Some(e) = extender {
        policies.text_stages = e.nodes();
    }
    policies
}

/// Admission's check of `prompt_extend`: refused by name when `model` has no rewriter, and its
/// sampling (`node_params.prompt_extend`) checked before any work.
pub fn extend_check(has_extender: bool, model: &str) -> impl Fn(&ResolvedRequest) -> Result<(), RequestError> {
    let model = model.to_string();
    move |r| {
        if !r.prompt_extend {
            if r.node_params.contains_key(EXTEND_NODE) {
                return Err(RequestError::new(
                    format!("node_params.{EXTEND_NODE}"),
                    "given without prompt_extend: true",
                ));
            }
            return Ok(());
        }
        if !has_extender {
            return Err(RequestError::new(
                "prompt_extend",
                format!(
                    "model `{model}` has no prompt extender (a `{EXTENDER_FOLDER}/` folder in the model, or \
                     --prompt-extender DIR)"
                ),
            ));
        }
        crate::lm::check_decode(r, EXTEND_NODE, &format!("node_params.{EXTEND_NODE}."))
    }
}
