//! The prompt extender of a video model: the rewriter a request with `prompt_extend` runs
//! before its text encoder (a language-model folder whose family offers
//! [`PromptRewriter`], found through the registry). It comes from `--prompt-extender DIR`
//! (`model.prompt_extender`), else from the model folder's own `prompt_extender/` (the shipped
//! default model has one, trained to map free-form words onto its vocabulary).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use anyhow::{Context, Result};
use fastvideo_models::{registry, LoadedModel, ModelKind, PromptRewriter};
use fastvideo_pipeline::{LoopPolicies, EXTEND_NODE};
use fastvideo_request::{RequestError, ResolvedRequest};
use tch::Device;

use crate::config::ModelConfig;

/// A loaded rewriter by its folder and device, held weakly: it lives as long as a model uses it.
type SharedRewriter = (PathBuf, Device, Weak<dyn PromptRewriter>);

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
    /// flag or the folder. Models sharing a rewriter folder share one copy of it (the same
    /// `--prompt-extender`, or copies of one model folder).
    pub fn load_extender(&self, model_dir: &Path, device: Device) -> Result<Option<Arc<dyn PromptRewriter>>> {
        static LOADED: Mutex<Vec<SharedRewriter>> = Mutex::new(Vec::new());
        let Some(dir) = self.extender_dir(model_dir) else { return Ok(None) };
        let key = dir.canonicalize().unwrap_or_else(|_| dir.clone());
        let mut loaded = LOADED.lock().unwrap_or_else(|e| e.into_inner());
        loaded.retain(|(_, _, w)| w.strong_count() > 0);
        if let Some(e) = loaded.iter().find(|(p, d, _)| *p == key && *d == device).and_then(|(_, _, w)| w.upgrade()) {
            return Ok(Some(e));
        }
        let what = match &self.prompt_extender {
            Some(_) => format!("model.prompt_extender (--prompt-extender) {}", dir.display()),
            None => format!("the model's prompt extender {}", dir.display()),
        };
        let e = rewriter(&dir, device).with_context(|| what)?;
        loaded.push((key, device, Arc::downgrade(&e)));
        Ok(Some(e))
    }
}

/// The language-model folder `dir` as a prompt rewriter, through the registry: refused, naming
/// the family, when its family does not rewrite prompts.
fn rewriter(dir: &Path, device: Device) -> Result<Arc<dyn PromptRewriter>> {
    let family = registry().detect(dir, ModelKind::Language)?;
    family.rewriter(dir, device)?.ok_or_else(|| anyhow::anyhow!("{} models do not rewrite prompts", family.name()))
}

/// `policies` with the rewriter's nodes before the text encoder (unchanged without one).
pub fn with_extender(mut policies: LoopPolicies, extender: Option<&dyn PromptRewriter>) -> LoopPolicies {
    if let Some(e) = extender {
        policies.text_stages = e.nodes();
    }
    policies
}

/// Admission's check of `prompt_extend`: refused by name when `model` has no rewriter or the
/// prompt does not fit it, and its sampling (`node_params.prompt_extend`) checked before any work.
pub fn extend_check(
    extender: Option<Arc<dyn PromptRewriter>>,
    model: &str,
) -> impl Fn(&ResolvedRequest) -> Result<(), RequestError> {
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
        let Some(extender) = &extender else {
            return Err(RequestError::new(
                "prompt_extend",
                format!(
                    "model `{model}` has no prompt extender (a `{EXTENDER_FOLDER}/` folder in the model, or \
                     --prompt-extender DIR)"
                ),
            ));
        };
        extender.check_prompt(&r.prompt).map_err(|rule| RequestError::new("prompt", rule))?;
        fastvideo_pipeline::token::check_decode(r, EXTEND_NODE, &format!("node_params.{EXTEND_NODE}."))
    }
}

/// What a front end says about a request's prompt before it runs (the server's job record keeps
/// it as `warnings`): today, the words the text encoder maps to its unknown token.
pub type PromptWarnings = Arc<dyn Fn(&ResolvedRequest) -> Vec<String> + Send + Sync>;

/// The warning for `unknown` words of a prompt (none when there are none); `extend` names how to
/// ask for the model's prompt extender (`--extend-prompt`, `prompt_extend: true`), when it has one.
pub fn unknown_words_warning(unknown: &[String], extend: Option<&str>) -> Option<String> {
    if unknown.is_empty() {
        return None;
    }
    let hint = match extend {
        Some(how) => {
            format!("rephrase with words it knows, or add {how} to have the model's prompt extender rewrite it")
        }
        None => "rephrase with words it knows".into(),
    };
    Some(format!(
        "the text encoder does not know {}: {}; the model ignores them ({hint})",
        if unknown.len() == 1 { "this word" } else { "these words" },
        unknown.join(", ")
    ))
}

/// [`PromptWarnings`] of a model: the unknown words of requests that do not extend their prompt
/// (an extended prompt is only known once the rewriter ran); none for a model that cannot tell.
pub fn prompt_warnings(model: &dyn LoadedModel, has_extender: bool) -> PromptWarnings {
    let Some(unknown) = model.unknown_words() else { return Arc::new(|_: &ResolvedRequest| Vec::new()) };
    Arc::new(move |r: &ResolvedRequest| {
        if r.prompt_extend {
            return Vec::new();
        }
        let how = has_extender.then_some("\"prompt_extend\": true");
        unknown_words_warning(&unknown(&r.prompt), how).into_iter().collect()
    })
}
