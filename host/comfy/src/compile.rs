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
    /// file, or `default` for the embedded default model). A diffusers-layout folder holds the
    /// transformer, text encoder and VAE, so a run's loaders must all map to one folder.
    #[serde(default)]
    pub models: BTreeMap<String, String>,
}

impl WorkflowConfig {
    /// The one model folder that serves every file `run` loads.
    pub fn folder_for(&self, run: &RunPlan) -> Result<String, CompileError> {
        let mut folder: Option<(&str, &str)> = None;
        for f in &run.files {
            let Some(dir) = self.models.get(&f.file) else {
                let msg = format!(
                    "model file `{}` is not mapped to a model folder (deploy config `[workflows.models]`)",
                    f.file
                );
                return Err(CompileError::node(&f.node, msg));
            };
            match folder {
                Some((d, node)) if d != dir => {
                    let msg = format!(
                        "`{}` maps to {dir}, but node {node}'s file maps to {d}; one run uses one model folder",
                        f.file
                    );
                    return Err(CompileError::node(&f.node, msg));
                }
                Some(_) => {}
                None => folder = Some((dir, &f.node)),
            }
        }
        folder.map(|(d, _)| d.to_string()).ok_or_else(|| CompileError::node(&run.sampler_node, "loads no model"))
    }
}
