//! What a workflow translator does for most nodes: copy some ComfyUI inputs into a stage's
//! parameters (renamed to the stage's vocabulary) and list the links among them as the graph
//! node's inputs. A translator then only says, per node type, which stage and which inputs.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use serde_json::{Map, Value};

use crate::{ComfyNode, GraphNode};

/// `{"$ref": NAME}`'s NAME: a link to another node's value.
pub fn ref_name(v: &Value) -> Option<&str> {
    v.as_object().filter(|o| o.len() == 1)?.get("$ref")?.as_str()
}

/// The stage parameters of `node`: for each `(param, input)` of `renames`, the input's value
/// (a literal, or a link as `{"$ref": …}`); missing and null inputs are left out.
pub fn params(node: &ComfyNode, renames: &[(&str, &str)]) -> Result<Map<String, Value>, String> {
    let mut p = Map::new();
    for (param, input) in renames {
        let Some(i) = node.inputs.iter().find(|i| i.name == *input) else { continue };
        let v: Value = serde_json::from_str(&i.value_json).map_err(|e| format!("input `{input}`: {e}"))?;
        if !v.is_null() {
            p.insert(param.to_string(), v);
        }
    }
    Ok(p)
}

/// The graph node running `stage` on `params` for `node`, with `outputs` values named
/// `{id}.0`, `{id}.1`, … and every link among the parameters as an input.
pub fn graph_node(node: &ComfyNode, stage: &str, outputs: usize, params: Map<String, Value>) -> GraphNode {
    GraphNode {
        name: node.id.clone(),
        stage: stage.into(),
        inputs: params.values().filter_map(ref_name).map(String::from).collect(),
        outputs: (0..outputs).map(|k| format!("{}.{k}", node.id)).collect(),
        params_json: Value::Object(params).to_string(),
    }
}

/// The class types an `object_info.json` declares (what a translator shipping one handles).
pub fn handles(object_info: &str) -> Vec<String> {
    let info: Value = serde_json::from_str(object_info).unwrap_or(Value::Null);
    info.as_object().map(|m| m.keys().cloned().collect()).unwrap_or_default()
}

/// How a node type maps: its stage, how many values it makes, and `(stage parameter, ComfyUI
/// input)` pairs for [`params`].
pub type StageRule = (&'static str, usize, &'static [(&'static str, &'static str)]);
