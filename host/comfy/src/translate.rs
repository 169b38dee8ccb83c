//! Translators turn ComfyUI nodes into pipeline-graph nodes. The host never knows a node type
//! itself: every type comes from a translator (a `workflow-translator` plugin, enabled by hash
//! in the deploy config), which also declares the type's schema.

use std::collections::HashMap;
use std::sync::Arc;

use serde::Serialize;
use serde_json::{json, Value};

use crate::graph::{Input, Workflow};
use crate::{CompileError, Schemas};

/// A ComfyUI node as a translator receives it.
#[derive(Debug, Clone, PartialEq)]
pub struct ComfyNode {
    /// The node's id (`outer:inner` inside subgraphs).
    pub id: String,
    /// Its type.
    pub class_type: String,
    /// Its inputs by name: literal values, or `{"$ref": "ID.K"}` (see [`value_ref`]).
    pub inputs: Vec<(String, Value)>,
}

/// One node of the pipeline graph.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GraphNode {
    /// Unique in the graph.
    pub name: String,
    /// What it does: one of [`crate::stages::STAGES`].
    pub stage: String,
    /// The values it reads (each also a `{"$ref": …}` somewhere in `params`).
    pub inputs: Vec<String>,
    /// The values it produces, one per output of its stage.
    pub outputs: Vec<String>,
    /// The stage's parameters; a value may be `{"$ref": NAME}`.
    pub params: Value,
    /// The ComfyUI node it came from.
    pub origin: String,
}

/// The name of output `k` of ComfyUI node `id` in the pipeline graph.
pub fn value_name(id: &str, k: usize) -> String {
    format!("{id}.{k}")
}

/// A reference to a value, as it appears in inputs and params.
pub fn value_ref(name: &str) -> Value {
    json!({ "$ref": name })
}

/// The value a `{"$ref": …}` names.
pub fn as_ref(v: &Value) -> Option<&str> {
    let o = v.as_object()?;
    (o.len() == 1).then(|| o.get("$ref")?.as_str()).flatten()
}

/// What translates ComfyUI node types: a plugin, or a native implementation in tests.
pub trait Translator: Send + Sync {
    /// For errors and reports (the plugin's name in the deploy).
    fn name(&self) -> &str;
    /// The class types it handles.
    fn handles(&self) -> Result<Vec<String>, String>;
    /// Their schemas, as ComfyUI's `/object_info` answers (an object keyed by class type).
    fn declare(&self) -> Result<Value, String>;
    /// One node's fragment.
    fn translate(&self, node: &ComfyNode) -> Result<Vec<GraphNode>, String>;
}

/// The deploy's translators, indexed by the class types they handle.
#[derive(Clone, Default)]
pub struct Translators {
    list: Vec<Arc<dyn Translator>>,
    by_type: HashMap<String, usize>,
    schemas: Schemas,
    object_info: serde_json::Map<String, Value>,
}

impl Translators {
    /// Asks each translator what it handles and declares. Two translators claiming one class
    /// type is a deploy mistake and refused, naming both.
    pub fn new(list: Vec<Arc<dyn Translator>>) -> Result<Self, String> {
        let mut t = Translators::default();
        for tr in list {
            let i = t.list.len();
            let types = tr.handles().map_err(|e| format!("translator `{}`: handles: {e}", tr.name()))?;
            let declared = tr.declare().map_err(|e| format!("translator `{}`: declare: {e}", tr.name()))?;
            let schemas = Schemas::from_object_info(&declared)
                .map_err(|e| format!("translator `{}`: declare: {e}", tr.name()))?;
            for ty in types {
                if schemas.get(&ty).is_none() {
                    return Err(format!("translator `{}` handles `{ty}` but declares no schema for it", tr.name()));
                }
                if let Some(&j) = t.by_type.get(&ty) {
                    return Err(format!(
                        "translators `{}` and `{}` both handle `{ty}`; enable one",
                        t.list[j].name(),
                        tr.name()
                    ));
                }
                t.by_type.insert(ty, i);
            }
            t.schemas.extend(schemas);
            if let Value::Object(m) = declared {
                t.object_info.extend(m);
            }
            t.list.push(tr);
        }
        Ok(t)
    }

    /// The declared schemas of every handled type.
    pub fn schemas(&self) -> &Schemas {
        &self.schemas
    }

    /// The declared schemas as ComfyUI's `/object_info` serves them.
    pub fn object_info(&self) -> &serde_json::Map<String, Value> {
        &self.object_info
    }

    /// Whether some translator handles `class_type`.
    pub fn handles(&self, class_type: &str) -> bool {
        self.by_type.contains_key(class_type)
    }

    /// The handled class types, sorted.
    pub fn types(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.by_type.keys().map(String::as_str).collect();
        v.sort();
        v
    }

    /// Translates every node; the fragments together, in workflow order. Every node without
    /// a translator is reported at once (none is dropped).
    pub fn translate(&self, w: &Workflow) -> Result<Vec<GraphNode>, CompileError> {
        let missing: Vec<(String, String)> = w
            .nodes
            .iter()
            .filter(|n| !self.handles(&n.class_type))
            .map(|n| (n.id.clone(), n.class_type.clone()))
            .collect();
        if !missing.is_empty() {
            return Err(CompileError::Untranslated(missing));
        }
        let mut out = Vec::new();
        for n in &w.nodes {
            let tr = &self.list[self.by_type[&n.class_type]];
            let inputs = n
                .inputs
                .iter()
                .map(|(k, v)| {
                    let v = match v {
                        Input::Link { node, output } => value_ref(&value_name(node, *output)),
                        Input::Value(v) => v.clone(),
                    };
                    (k.clone(), v)
                })
                .collect();
            let node = ComfyNode { id: n.id.clone(), class_type: n.class_type.clone(), inputs };
            let fragment = tr.translate(&node).map_err(|message| CompileError::Translator {
                node: n.id.clone(),
                class_type: n.class_type.clone(),
                translator: tr.name().to_string(),
                message,
            })?;
            out.extend(fragment.into_iter().map(|g| GraphNode { origin: n.id.clone(), ..g }));
        }
        Ok(out)
    }
}
