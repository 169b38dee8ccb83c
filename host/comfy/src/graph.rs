//! The normalized node graph both ComfyUI formats become, and the API format itself
//! (`{"id": {"class_type", "inputs"}}`, what ComfyUI's `/prompt` takes).

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::WorkflowError;

/// A workflow as nodes with named inputs: what translators and the compiler read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Workflow {
    /// In the order of the file (subgraph contents where their instance was).
    pub nodes: Vec<Node>,
}

/// One executable node.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// ComfyUI's id for it: the file's id, `outer:inner` for a node inside a subgraph.
    pub id: String,
    /// The node type (`KSampler`, `CLIPTextEncode`, …).
    pub class_type: String,
    /// The title a user gave it, if any.
    pub title: Option<String>,
    /// Inputs by name: links to other nodes' outputs, or values (widgets).
    pub inputs: BTreeMap<String, Input>,
    /// Widget values of a UI-format node whose type has no schema here, so their names are
    /// unknown; in the file's order. Empty for API-format nodes and for known types.
    pub unnamed: Vec<Value>,
}

/// An input's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// Output `output` of node `node`.
    Link {
        /// The id of the node whose output this is.
        node: String,
        /// Which of its outputs (0-based).
        output: usize,
    },
    /// A literal (a widget's value).
    Value(Value),
}

impl Workflow {
    /// The node with this id.
    pub fn node(&self, id: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// Checks that every link names a node of this workflow.
    pub fn check_links(&self) -> Result<(), WorkflowError> {
        for n in &self.nodes {
            for (name, input) in &n.inputs {
                if let Input::Link { node, .. } = input {
                    if self.node(node).is_none() {
                        let msg = format!("links to node {node}, which is not in the workflow");
                        return Err(WorkflowError::at(&n.id, format!("inputs.{name}"), msg));
                    }
                }
            }
        }
        Ok(())
    }

    /// The workflow in ComfyUI's API format (links as `[node_id, output]`). Unnamed widget
    /// values have no place there and are left out.
    pub fn to_api(&self) -> Value {
        let mut out = Map::new();
        for n in &self.nodes {
            let inputs: Map<String, Value> = n
                .inputs
                .iter()
                .map(|(k, v)| {
                    let v = match v {
                        Input::Link { node, output } => json!([node, output]),
                        Input::Value(v) => v.clone(),
                    };
                    (k.clone(), v)
                })
                .collect();
            let mut node = json!({ "class_type": n.class_type, "inputs": inputs });
            if let Some(t) = &n.title {
                node["_meta"] = json!({ "title": t });
            }
            out.insert(n.id.clone(), node);
        }
        Value::Object(out)
    }
}

/// Reads an API-format prompt. As in ComfyUI, a list value is a link `[node_id, output]`.
pub fn parse_api(prompt: &Map<String, Value>) -> Result<Workflow, WorkflowError> {
    let mut nodes = Vec::with_capacity(prompt.len());
    for (id, v) in prompt {
        let Some(obj) = v.as_object() else {
            return Err(WorkflowError::at(id, "", "a node is an object with `class_type` and `inputs`"));
        };
        let class_type = match obj.get("class_type") {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            _ => return Err(WorkflowError::at(id, "class_type", "missing or not a string")),
        };
        let mut inputs = BTreeMap::new();
        match obj.get("inputs") {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) => {
                for (name, value) in m {
                    inputs.insert(name.clone(), api_input(id, name, value)?);
                }
            }
            Some(_) => return Err(WorkflowError::at(id, "inputs", "must be an object of input name to value")),
        }
        let title = obj.get("_meta").and_then(|m| m.get("title")).and_then(Value::as_str).map(String::from);
        nodes.push(Node { id: id.clone(), class_type, title, inputs, unnamed: Vec::new() });
    }
    let w = Workflow { nodes };
    w.check_links()?;
    Ok(w)
}

fn api_input(id: &str, name: &str, value: &Value) -> Result<Input, WorkflowError> {
    let Value::Array(items) = value else { return Ok(Input::Value(value.clone())) };
    let bad = || WorkflowError::at(id, format!("inputs.{name}"), "a list is a link: [node_id, output_index]");
    let [from, output] = items.as_slice() else { return Err(bad()) };
    let node = match from {
        Value::String(s) => s.clone(),
        Value::Number(n) if n.is_u64() => n.to_string(),
        _ => return Err(bad()),
    };
    let output = output.as_u64().ok_or_else(bad)? as usize;
    Ok(Input::Link { node, output })
}
