//! Node-type schemas in the shape of ComfyUI's `/object_info`, which is also what translator
//! plugins declare. A UI-format workflow stores widget values by position; the schema gives
//! them their names.

use std::collections::HashMap;

use serde_json::Value;

use crate::WorkflowError;

/// The widget types the ComfyUI frontend draws as widgets (a list type is a combo).
const WIDGET_TYPES: &[&str] = &["INT", "FLOAT", "STRING", "BOOLEAN", "COMBO"];

/// Values of the frontend-only "control after generate" widget that follows a seed.
const CONTROL_VALUES: &[&str] = &["fixed", "increment", "decrement", "randomize"];

/// One declared input of a node type.
#[derive(Debug, Clone, PartialEq)]
pub struct InputDecl {
    /// Its name in the API format.
    pub name: String,
    /// Its type: `INT`, `MODEL`, …; `COMBO` for a list of choices.
    pub ty: String,
    /// Drawn as a widget, so a UI-format file stores its value in `widgets_values`.
    pub widget: bool,
    /// Followed in `widgets_values` by the frontend's control-after-generate value.
    pub control_after_generate: bool,
    /// From the `optional` group.
    pub optional: bool,
    /// The declaration's options (`default`, `min`, `options`, …), as declared.
    pub options: Value,
    /// A dynamic combo (`COMFY_DYNAMICCOMBO_V3`): each choice's key and the widgets it adds,
    /// stored after the choice in a UI-format file and named `{name}.{widget}` in the API format.
    pub choices: Vec<(String, Vec<InputDecl>)>,
}

/// What a node type takes and gives.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSchema {
    /// Inputs in declaration order: required, then optional.
    pub inputs: Vec<InputDecl>,
    /// Output types, by index.
    pub outputs: Vec<String>,
}

impl NodeSchema {
    /// Reads one `/object_info` entry. The order of inputs comes from `input_order` when
    /// present, else from the order of the `input` maps.
    pub fn from_object_info(class_type: &str, info: &Value) -> Result<Self, WorkflowError> {
        let err = |field: &str, msg: &str| WorkflowError::top(format!("{class_type}.{field}"), msg);
        let mut inputs = Vec::new();
        for group in ["required", "optional"] {
            let Some(decls) = info.get("input").and_then(|i| i.get(group)) else { continue };
            let decls = decls.as_object().ok_or_else(|| err(&format!("input.{group}"), "must be an object"))?;
            let order: Vec<String> = match info.get("input_order").and_then(|o| o.get(group)) {
                Some(Value::Array(names)) => names.iter().filter_map(Value::as_str).map(String::from).collect(),
                _ => decls.keys().cloned().collect(),
            };
            for name in order {
                let Some(decl) = decls.get(&name) else {
                    return Err(err(
                        &format!("input_order.{group}"),
                        &format!("names `{name}`, which is not declared"),
                    ));
                };
                inputs.push(
                    input_decl(&name, decl, group == "optional")
                        .map_err(|m| err(&format!("input.{group}.{name}"), m))?,
                );
            }
        }
        let outputs = match info.get("output") {
            None => Vec::new(),
            Some(Value::Array(types)) => types.iter().map(type_name).collect(),
            Some(_) => return Err(err("output", "must be a list of types")),
        };
        Ok(Self { inputs, outputs })
    }

    /// The widget inputs, in the order a UI-format file stores their values.
    pub fn widgets(&self) -> impl Iterator<Item = &InputDecl> {
        self.inputs.iter().filter(|i| i.widget)
    }

    /// Names a UI-format node's positional `widgets_values`. The frontend's
    /// control-after-generate value after a seed is skipped; values past the declared widgets
    /// (frontend-only widgets such as an upload button) are dropped.
    pub fn name_widgets(&self, values: &[Value]) -> Vec<(String, Value)> {
        let mut out = Vec::new();
        let mut rest = values.iter().peekable();
        for w in self.widgets() {
            let Some(v) = rest.next() else { break };
            out.push((w.name.clone(), v.clone()));
            if w.control_after_generate {
                rest.next_if(|v| v.as_str().is_some_and(|s| CONTROL_VALUES.contains(&s)));
            }
            // A dynamic combo's chosen widgets follow its choice.
            let chosen = w.choices.iter().find(|(k, _)| v.as_str() == Some(k.as_str()));
            for sub in chosen.map_or(&[][..], |(_, subs)| &subs[..]).iter().filter(|i| i.widget) {
                let Some(v) = rest.next() else { break };
                out.push((format!("{}.{}", w.name, sub.name), v.clone()));
            }
        }
        out
    }
}

/// `["INT", {...}]`, `[["a", "b"], {...}]`, `["COMBO", {"options": [...]}]`, a type list
/// (`"FLOAT,INT"`: a widget of its first type) or a dynamic combo
/// (`["COMFY_DYNAMICCOMBO_V3", {"options": [{"key", "inputs", "input_order"?}, …]}]`).
fn input_decl(name: &str, decl: &Value, optional: bool) -> Result<InputDecl, &'static str> {
    let Value::Array(parts) = decl else { return Err("must be [type, options]") };
    let ty = parts.first().ok_or("must be [type, options]")?;
    let options = parts.get(1).cloned().unwrap_or(Value::Null);
    let flag = |k: &str| options.get(k).and_then(Value::as_bool);
    let ty = type_name(ty);
    let first = ty.split(',').next().unwrap_or_default();
    let dynamic = ty == DYNAMIC_COMBO;
    let widget = (dynamic || WIDGET_TYPES.contains(&first)) && flag("forceInput") != Some(true);
    // The frontend adds the control to seeds by name when the declaration does not say.
    let control = flag("control_after_generate").unwrap_or(first == "INT" && (name == "seed" || name == "noise_seed"));
    let choices = match dynamic {
        true => choices(&options)?,
        false => Vec::new(),
    };
    Ok(InputDecl {
        name: name.to_string(),
        ty,
        widget,
        control_after_generate: widget && control,
        optional,
        options,
        choices,
    })
}

/// A dynamic combo's type.
const DYNAMIC_COMBO: &str = "COMFY_DYNAMICCOMBO_V3";

/// A dynamic combo's choices: each key with its inputs, required then optional (in the
/// option's `input_order` when it gives one).
fn choices(options: &Value) -> Result<Vec<(String, Vec<InputDecl>)>, &'static str> {
    let Some(list) = options.get("options").and_then(Value::as_array) else {
        return Err("a dynamic combo lists its options");
    };
    let mut out = Vec::new();
    for o in list {
        let key = o.get("key").and_then(Value::as_str).ok_or("a dynamic combo option has a `key`")?;
        let mut inputs = Vec::new();
        for group in ["required", "optional"] {
            let Some(decls) = o.get("inputs").and_then(|i| i.get(group)).and_then(Value::as_object) else { continue };
            let order: Vec<String> = match o.get("input_order").and_then(|i| i.get(group)) {
                Some(Value::Array(names)) => names.iter().filter_map(Value::as_str).map(String::from).collect(),
                _ => decls.keys().cloned().collect(),
            };
            for n in order {
                let d = decls.get(&n).ok_or("a dynamic combo option's input_order names an undeclared input")?;
                inputs.push(input_decl(&n, d, group == "optional")?);
            }
        }
        out.push((key.to_string(), inputs));
    }
    Ok(out)
}

fn type_name(ty: &Value) -> String {
    match ty {
        Value::String(s) => s.clone(),
        Value::Array(_) => "COMBO".into(),
        other => other.to_string(),
    }
}

/// Schemas by node type.
#[derive(Debug, Clone, Default)]
pub struct Schemas(HashMap<String, NodeSchema>);

impl Schemas {
    /// Reads a whole `/object_info` answer (`{"KSampler": {...}, ...}`).
    pub fn from_object_info(all: &Value) -> Result<Self, WorkflowError> {
        let all = all.as_object().ok_or_else(|| WorkflowError::top("object_info", "must be an object"))?;
        let mut s = Self::default();
        for (ty, info) in all {
            s.0.insert(ty.clone(), NodeSchema::from_object_info(ty, info)?);
        }
        Ok(s)
    }

    /// The schema of `class_type`, if declared.
    pub fn get(&self, class_type: &str) -> Option<&NodeSchema> {
        self.0.get(class_type)
    }

    /// Adds (or replaces) the schemas of `other`.
    pub fn extend(&mut self, other: Schemas) {
        self.0.extend(other.0);
    }

    /// How many node types are declared.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// No node type is declared.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
