//! A workflow file to runs: parse (with the translators' schemas), translate, check the graph,
//! lower it, and map its model files to the deploy's model folders.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::{parse, plan, CompileError, PipelineGraph, RunPlan, Translators, Workflow};

/// A compiled workflow: the normalized graph, the pipeline graph and its runs.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// The workflow as read.
    pub workflow: Workflow,
    /// The checked pipeline graph.
    pub graph: PipelineGraph,
    /// One per sampler feeding an output.
    pub runs: Vec<RunPlan>,
}

/// Compiles a workflow (either format) with the deploy's translators.
pub fn compile(v: &Value, translators: &Translators) -> Result<Compiled, CompileError> {
    let workflow = parse(v, translators.schemas())?;
    let graph = PipelineGraph::build(translators.translate(&workflow)?)?;
    let runs = plan(&graph)?;
    Ok(Compiled { workflow, graph, runs })
}

/// The deploy's `[workflows]` table: which local model folder serves the model files ComfyUI
/// workflows name.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkflowConfig {
    /// File name (`wan2.1_t2v_1.3B_fp16.safetensors`) → model folder (relative to the deploy
    /// file; `default` and `default-i2v` are the models shipped in the repository), or a list
    /// of folders for a file several models share (ComfyUI's Wan templates all name the same
    /// text encoder and VAE files). A diffusers-layout folder holds the transformer, text
    /// encoder and VAE, so a run's loaders must all map to one folder.
    #[serde(default)]
    pub models: BTreeMap<String, Folders>,
}

/// The folder or folders a model file maps to.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Folders {
    /// One folder.
    One(String),
    /// Several, in order of preference.
    Many(Vec<String>),
}

impl Folders {
    /// The folders, in order.
    pub fn list(&self) -> &[String] {
        match self {
            Folders::One(f) => std::slice::from_ref(f),
            Folders::Many(v) => v,
        }
    }
}

impl WorkflowConfig {
    /// Every model folder that serves all the files `run` loads, the diffusion model's order
    /// first (a server picks the one it serves).
    pub fn folders_for(&self, run: &RunPlan) -> Result<Vec<String>, CompileError> {
        let mut files: Vec<_> = run.files.iter().collect();
        files.sort_by_key(|f| !matches!(f.role, "diffusion_model" | "checkpoint"));
        let mut common: Option<(Vec<&str>, &str)> = None;
        for f in files {
            let Some(dirs) = self.models.get(&f.file) else {
                let msg = format!(
                    "model file `{}` is not mapped to a model folder (deploy config `[workflows.models]`)",
                    f.file
                );
                return Err(CompileError::node(&f.node, msg));
            };
            let dirs = dirs.list();
            match &mut common {
                None => common = Some((dirs.iter().map(String::as_str).collect(), &f.node)),
                Some((kept, node)) => {
                    let both: Vec<&str> = kept.iter().copied().filter(|d| dirs.iter().any(|x| x == d)).collect();
                    if both.is_empty() {
                        let msg = format!(
                            "`{}` maps to {}, but node {node}'s file maps to {}; one run uses one model folder",
                            f.file,
                            dirs.join(", "),
                            kept.join(", ")
                        );
                        return Err(CompileError::node(&f.node, msg));
                    }
                    *kept = both;
                }
            }
        }
        common
            .filter(|(kept, _)| !kept.is_empty())
            .map(|(kept, _)| kept.into_iter().map(String::from).collect())
            .ok_or_else(|| CompileError::node(&run.sampler_node, "loads no model"))
    }

    /// The first of [`folders_for`](Self::folders_for).
    pub fn folder_for(&self, run: &RunPlan) -> Result<String, CompileError> {
        Ok(self.folders_for(run)?.remove(0))
    }
}
