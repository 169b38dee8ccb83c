use std::collections::BTreeSet;
use std::sync::Arc;

use fastvideo_request::{ResolvedRequest, TaskType};
use thiserror::Error;

use crate::{LoopStage, Observer, Reward, Stage};

/// What a node runs.
#[derive(Clone)]
pub enum NodeKind {
    /// A one-shot stage, run in a single `advance`.
    Stage(Arc<dyn Stage>),
    /// A loop stage, driven through `init`, one `advance` per step, and `finalize`.
    Loop(Arc<dyn LoopStage>),
}

/// One node of a pipeline graph. Edges are implicit: a node's `inputs` are value names that
/// earlier nodes list in their `outputs` (or that the request provides).
#[derive(Clone)]
pub struct Node {
    /// Unique within the pipeline; used in errors, events, metrics and per-node request
    /// parameters.
    pub name: String,
    /// The stage this node runs.
    pub kind: NodeKind,
    /// Values this node needs.
    pub inputs: Vec<String>,
    /// Values this node may produce (some only for some requests, e.g. negative embeddings).
    pub outputs: Vec<String>,
    /// Tasks this node runs for; empty means every task of the pipeline.
    pub tasks: Vec<TaskType>,
    /// Runs only for requests this accepts (none: every request of its tasks), e.g. the prompt
    /// extension's nodes for requests that ask for it. Validation counts a gated node's outputs
    /// as produced, so what reads them must be gated alike or read them as optional.
    pub gate: Option<fn(&ResolvedRequest) -> bool>,
    /// The parameters a request may give this node (`node_params.<name>`), as a JSON Schema,
    /// checked at admission by [`PipelineSpec::check_node_params`].
    pub params: Option<NodeParams>,
}

/// A node's parameter schema, compiled once.
#[derive(Clone)]
pub struct NodeParams {
    /// The JSON Schema (served to clients as it is).
    pub schema: serde_json::Value,
    validator: Arc<jsonschema::Validator>,
}

impl Node {
    /// A one-shot node that runs for every task, reading `inputs` and producing `outputs`.
    pub fn stage(name: &str, stage: Arc<dyn Stage>, inputs: &[&str], outputs: &[&str]) -> Self {
        Self::new(name, NodeKind::Stage(stage), inputs, outputs)
    }
    /// A loop node that runs for every task, reading `inputs` and producing `outputs`.
    pub fn looped(name: &str, stage: Arc<dyn LoopStage>, inputs: &[&str], outputs: &[&str]) -> Self {
        Self::new(name, NodeKind::Loop(stage), inputs, outputs)
    }
    fn new(name: &str, kind: NodeKind, inputs: &[&str], outputs: &[&str]) -> Self {
        let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        Self {
            name: name.into(),
            kind,
            inputs: own(inputs),
            outputs: own(outputs),
            tasks: Vec::new(),
            gate: None,
            params: None,
        }
    }
    /// The same node, taking request parameters `node_params.<name>` that `schema` (a JSON
    /// Schema) accepts; a schema that does not compile is a wiring mistake, reported here.
    pub fn with_params(mut self, schema: serde_json::Value) -> anyhow::Result<Self> {
        let validator = jsonschema::validator_for(&schema)
            .map_err(|e| anyhow::anyhow!("node `{}`: its parameter schema does not compile: {e}", self.name))?;
        self.params = Some(NodeParams { schema, validator: Arc::new(validator) });
        Ok(self)
    }
    /// The same node, run only for requests of `tasks`.
    pub fn for_tasks(mut self, tasks: &[TaskType]) -> Self {
        self.tasks = tasks.to_vec();
        self
    }
    /// The same node, run only for requests `gate` accepts.
    pub fn when(mut self, gate: fn(&ResolvedRequest) -> bool) -> Self {
        self.gate = Some(gate);
        self
    }
    /// Whether this node runs for requests of `task`.
    pub fn runs_for(&self, task: TaskType) -> bool {
        self.tasks.is_empty() || self.tasks.contains(&task)
    }
    /// Whether this node runs for `request` (its task, and its gate).
    pub fn runs(&self, request: &ResolvedRequest) -> bool {
        self.runs_for(request.task) && self.gate.is_none_or(|g| g(request))
    }
}

/// A pipeline that failed validation: a wiring mistake in a model family, caught when the
/// pipeline is built rather than when a request reaches the bad node.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum SpecError {
    /// Two nodes share a name.
    #[error("pipeline `{pipeline}`: node name `{node}` is used twice")]
    DuplicateNode {
        /// The pipeline's name.
        pipeline: String,
        /// The repeated node name.
        node: String,
    },
    /// For some task, a node reads a value that neither the request nor an earlier node provides.
    #[error("pipeline `{pipeline}`: node `{node}` reads `{value}`, which no earlier node produces")]
    MissingInput {
        /// The pipeline's name.
        pipeline: String,
        /// The node with the unmet input.
        node: String,
        /// The value it reads.
        value: String,
    },
    /// For some task, no node produces the pipeline's final output.
    #[error("pipeline `{pipeline}`: no node produces the final output `{value}`")]
    MissingOutput {
        /// The pipeline's name.
        pipeline: String,
        /// The final output's value name.
        value: String,
    },
    /// A declared task has no loop node among the nodes that run for it.
    #[error("pipeline `{pipeline}` declares task `{task}` but has no loop node for it")]
    NoLoop {
        /// The pipeline's name.
        pipeline: String,
        /// The task, as its wire name.
        task: &'static str,
    },
}

/// A declarative, validated pipeline graph for one model family.
#[derive(Clone)]
pub struct PipelineSpec {
    /// The pipeline's name, used in validation errors.
    pub name: String,
    /// Tasks this pipeline serves; each was validated on its own.
    pub tasks: Vec<TaskType>,
    /// Nodes in run order; a run skips those whose `tasks` exclude the request's task.
    pub nodes: Vec<Node>,
    /// Watch every request run through this pipeline (bound by the deploy; none by default).
    pub observers: Vec<Arc<dyn Observer>>,
    /// The value a finished request returns (its artifact has this name), checked to be
    /// produced for every task.
    pub final_output: String,
    /// The value returned as the `latents` artifact when a request asks for them.
    pub latents: String,
    /// Rewards a request may name in `outputs.rewards` (bound by the deploy; none by default).
    pub rewards: Vec<Arc<dyn Reward>>,
    /// Which weights this pipeline's model holds: 0 as loaded, one more per weight update
    /// (each update builds a new spec; runs keep the spec, so the epoch, they started with).
    pub weight_epoch: u64,
    /// The model LoRA adapters apply to, when it takes them (the engine merges sets into it).
    pub adapters: Option<Arc<dyn crate::AdapterTarget>>,
}

impl PipelineSpec {
    /// Validates the graph: unique node names, and for every task every input is produced by an
    /// earlier node (or is in `provided`), `final_output` is produced, and a loop node exists.
    pub fn new(
        name: &str,
        tasks: Vec<TaskType>,
        nodes: Vec<Node>,
        provided: &[&str],
        final_output: &str,
    ) -> Result<Self, SpecError> {
        let pipeline = name.to_string();
        let mut names = BTreeSet::new();
        for n in &nodes {
            if !names.insert(n.name.as_str()) {
                return Err(SpecError::DuplicateNode { pipeline, node: n.name.clone() });
            }
        }
        for &task in &tasks {
            let mut have: BTreeSet<&str> = provided.iter().copied().collect();
            let mut loops = 0;
            for n in nodes.iter().filter(|n| n.runs_for(task)) {
                if let Some(v) = n.inputs.iter().find(|v| !have.contains(v.as_str())) {
                    return Err(SpecError::MissingInput { pipeline, node: n.name.clone(), value: v.clone() });
                }
                loops += matches!(n.kind, NodeKind::Loop(_)) as usize;
                have.extend(n.outputs.iter().map(String::as_str));
            }
            if !have.contains(final_output) {
                return Err(SpecError::MissingOutput { pipeline, value: final_output.into() });
            }
            if loops == 0 {
                return Err(SpecError::NoLoop { pipeline, task: task.as_str() });
            }
        }
        Ok(Self {
            name: pipeline,
            tasks,
            nodes,
            observers: Vec::new(),
            final_output: final_output.into(),
            latents: "latents".into(),
            rewards: Vec::new(),
            weight_epoch: 0,
            adapters: None,
        })
    }

    /// The same pipeline with these observers watching every request.
    pub fn with_observers(mut self, observers: Vec<Arc<dyn Observer>>) -> Self {
        self.observers = observers;
        self
    }

    /// The same pipeline with `target` taking adapters.
    pub fn with_adapters(mut self, target: Arc<dyn crate::AdapterTarget>) -> Self {
        self.adapters = Some(target);
        self
    }

    /// The same pipeline with these rewards available to requests.
    pub fn with_rewards(mut self, rewards: Vec<Arc<dyn Reward>>) -> Self {
        self.rewards = rewards;
        self
    }

    /// Checks a request's `node_params` against the nodes: a node that declares a schema must
    /// accept its value, and in a pipeline with such nodes every name must be one of its nodes
    /// (pipelines without any leave other names to whoever reads them — a world session's
    /// `rollout`, a chat's `ar_decode`). The error names the field (`node_params.<node>`) and,
    /// for an unknown node, the nodes that take parameters.
    pub fn check_node_params(&self, r: &ResolvedRequest) -> Result<(), fastvideo_request::RequestError> {
        let taking: Vec<&str> = self.nodes.iter().filter(|n| n.params.is_some()).map(|n| n.name.as_str()).collect();
        for (name, value) in &r.node_params {
            let field = format!("node_params.{name}");
            let Some(node) = self.nodes.iter().find(|n| &n.name == name) else {
                if taking.is_empty() {
                    continue;
                }
                return Err(fastvideo_request::RequestError::new(
                    field,
                    format!(
                        "pipeline `{}` has no node `{name}` (nodes taking parameters: {})",
                        self.name,
                        taking.join(", ")
                    ),
                ));
            };
            if let Some(p) = &node.params {
                if let Some(e) = p.validator.iter_errors(value).next() {
                    let at = e.instance_path.to_string();
                    let field = match at.is_empty() {
                        true => field,
                        false => format!("{field}{}", at.replace('/', ".")),
                    };
                    return Err(fastvideo_request::RequestError::new(field, e.to_string()));
                }
            }
        }
        Ok(())
    }

    /// The reward named `name`, if the pipeline has one.
    pub fn reward(&self, name: &str) -> Option<&Arc<dyn Reward>> {
        self.rewards.iter().find(|r| r.name() == name)
    }
}

/// What one forward of a model's main network processes for a request, in the model's own unit
/// (Wan: the transformer's tokens, latent frames times latent patches; a language model: the
/// positions a decode step runs). The engine's cost model learns step times per count, so the
/// model says what its work is and the engine never reasons about pixels or frames.
pub type WorkCount = Arc<dyn Fn(&ResolvedRequest) -> u64 + Send + Sync>;

/// Moving a model's large weights off the device (to host memory) and back, so a server can
/// declare more models than its device holds at once. The engine calls both on its executor
/// thread, between units of work, never while a forward of that model runs.
pub trait Residency: Send + Sync {
    /// Moves the weights to host memory (the device memory is freed).
    fn sleep(&self) -> anyhow::Result<()>;
    /// Brings them back to the device.
    fn wake(&self) -> anyhow::Result<()>;
    /// Device bytes of the weights it moves, while they are there: what a weight budget counts.
    fn bytes(&self) -> u64;
    /// Whether the weights are on the device now (not yet for a model loaded lazily, whose
    /// first wake reads them); the engine starts from what this says.
    fn is_resident(&self) -> bool {
        true
    }
}
