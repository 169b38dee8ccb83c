//! The UI format (what the ComfyUI frontend saves: `nodes` and `links` arrays, subgraphs in
//! `definitions`) flattened into the normalized graph, the way the frontend turns a workflow
//! into a prompt: subgraphs expanded (ids `outer:inner`, their virtual input and output nodes
//! −10 and −20 wired through), bypassed nodes (mode 4) passing their inputs on by type, muted
//! nodes (mode 2) removed, `Reroute` and `PrimitiveNode` resolved, notes ignored, and widget
//! values named from the node types' schemas.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use crate::graph::{Input, Node, Workflow};
use crate::{Schemas, WorkflowError};

/// Node types the frontend draws but never sends to the server.
const NOTES: &[&str] = &["Note", "MarkdownNote", "Label (rgthree)", "Fast Groups Bypasser (rgthree)"];
/// Subgraph nesting deeper than this is refused (a definition that contains itself).
const MAX_DEPTH: usize = 32;

/// Where an input's value comes from, before pass-through nodes are resolved.
#[derive(Debug, Clone, PartialEq)]
enum Src {
    /// Unconnected: a widget keeps its own value.
    None,
    /// A literal (a primitive node's or a promoted widget's value).
    Value(Value),
    /// Output `slot` of the node with this full id.
    From(String, usize),
}

/// A node after expansion: real, or one that only passes values through (reroutes, bypassed
/// and muted nodes, subgraph instances and their input nodes).
enum Raw {
    Real(RealNode),
    /// Output slot → its source.
    Pass(Vec<Src>),
}

struct RealNode {
    class_type: String,
    title: Option<String>,
    /// (name, source, is a widget input).
    inputs: Vec<(String, Src, bool)>,
    widgets: Value,
}

/// One graph level: the top level or a subgraph definition.
struct Level<'a> {
    nodes: &'a [Value],
    /// Link id → (origin node id, origin slot, target node id, target slot).
    links: HashMap<i64, (String, usize, String, usize)>,
}

struct Flattener<'a> {
    subgraphs: HashMap<&'a str, &'a Value>,
    raw: HashMap<String, Raw>,
    order: Vec<String>,
    /// Promoted widget values for nodes inside subgraph instances: full id → (name, value).
    overrides: HashMap<String, Vec<(String, Value)>>,
}

/// Flattens a UI-format workflow; `schemas` names widget values (types without one keep
/// them in [`Node::unnamed`]).
pub fn parse_ui(workflow: &Value, schemas: &Schemas) -> Result<Workflow, WorkflowError> {
    let subgraphs = match workflow.pointer("/definitions/subgraphs") {
        None | Some(Value::Null) => HashMap::new(),
        Some(Value::Array(defs)) => defs.iter().filter_map(|d| Some((d.get("id")?.as_str()?, d))).collect(),
        Some(_) => return Err(WorkflowError::top("definitions.subgraphs", "must be a list")),
    };
    let mut f = Flattener { subgraphs, raw: HashMap::new(), order: Vec::new(), overrides: HashMap::new() };
    let top = level(workflow, "")?;
    f.expand(&top, "", &[], 0)?;
    f.finish(schemas)
}

fn id_of(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::Number(n) => Some(n.to_string()),
        Value::String(s) => Some(s.clone()),
        _ => None,
    }
}

/// Reads a level's link table: top-level links are `[id, from, slot, to, slot, type]`,
/// subgraph links objects with `origin_id`, `origin_slot`, `target_id`, `target_slot`.
fn level<'a>(graph: &'a Value, where_: &str) -> Result<Level<'a>, WorkflowError> {
    let field = |f: &str| if where_.is_empty() { f.to_string() } else { format!("{where_}.{f}") };
    let nodes = graph
        .get("nodes")
        .and_then(Value::as_array)
        .ok_or_else(|| WorkflowError::top(field("nodes"), "missing or not a list"))?;
    let mut links = HashMap::new();
    for (i, l) in graph.get("links").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default().iter().enumerate()
    {
        let parsed = match l {
            Value::Array(a) if a.len() >= 5 => (|| {
                Some((
                    a[0].as_i64()?,
                    (id_of(a.get(1))?, a[2].as_u64()? as usize, id_of(a.get(3))?, a[4].as_u64()? as usize),
                ))
            })(),
            Value::Object(_) => (|| {
                let slot = |k: &str| l.get(k).and_then(Value::as_u64).map(|s| s as usize);
                Some((
                    l.get("id")?.as_i64()?,
                    (
                        id_of(l.get("origin_id"))?,
                        slot("origin_slot")?,
                        id_of(l.get("target_id"))?,
                        slot("target_slot")?,
                    ),
                ))
            })(),
            Value::Null => continue,
            _ => None,
        };
        let (id, link) = parsed.ok_or_else(|| {
            WorkflowError::top(field(&format!("links[{i}]")), "a link is [id, from, slot, to, slot, type] or an object")
        })?;
        links.insert(id, link);
    }
    Ok(Level { nodes, links })
}

impl<'a> Flattener<'a> {
    /// Expands one level; `bound[i]` is what feeds input slot `i` of the subgraph (its node −10).
    fn expand(&mut self, lvl: &Level<'a>, prefix: &str, bound: &[Src], depth: usize) -> Result<(), WorkflowError> {
        for node in lvl.nodes {
            let Some(id) = id_of(node.get("id")) else {
                return Err(WorkflowError::top(format!("{prefix}nodes"), "a node without an id"));
            };
            let full = format!("{prefix}{id}");
            let Some(ty) = node.get("type").and_then(Value::as_str) else {
                return Err(WorkflowError::at(&full, "type", "missing or not a string"));
            };
            if NOTES.contains(&ty) {
                continue;
            }
            let inputs = node.get("inputs").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
            let outputs = node.get("outputs").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
            let source = |input: &Value| -> Result<Src, WorkflowError> {
                let Some(link) = input.get("link").and_then(Value::as_i64) else { return Ok(Src::None) };
                let name = input.get("name").and_then(Value::as_str).unwrap_or("?");
                let Some((from, slot, _, _)) = lvl.links.get(&link) else {
                    return Err(WorkflowError::at(
                        &full,
                        format!("inputs.{name}"),
                        format!("link {link} is not in the link table"),
                    ));
                };
                Ok(if from == "-10" {
                    bound.get(*slot).cloned().unwrap_or(Src::None)
                } else {
                    Src::From(format!("{prefix}{from}"), *slot)
                })
            };
            let type_of = |v: &Value| v.get("type").map(|t| t.to_string()).unwrap_or_default();
            let mode = node.get("mode").and_then(Value::as_i64).unwrap_or(0);
            let raw = if mode == 2 {
                Raw::Pass(vec![Src::None; outputs.len()])
            } else if mode == 4 {
                // Each output takes the first input of its type, the same slot first.
                let mut outs = Vec::with_capacity(outputs.len());
                for (k, out) in outputs.iter().enumerate() {
                    let t = type_of(out);
                    let pick =
                        inputs.get(k).filter(|i| type_of(i) == t).or_else(|| inputs.iter().find(|i| type_of(i) == t));
                    outs.push(match pick {
                        Some(i) => source(i)?,
                        None => Src::None,
                    });
                }
                Raw::Pass(outs)
            } else if ty == "Reroute" {
                Raw::Pass(vec![match inputs.first() {
                    Some(i) => source(i)?,
                    None => Src::None,
                }])
            } else if ty == "PrimitiveNode" {
                let v = node.pointer("/widgets_values/0").cloned();
                Raw::Pass(vec![v.map_or(Src::None, Src::Value)])
            } else if let Some(def) = self.subgraphs.get(ty).copied() {
                if depth >= MAX_DEPTH {
                    return Err(WorkflowError::at(&full, "type", format!("subgraphs nest deeper than {MAX_DEPTH}")));
                }
                self.instance(node, def, &full, &inputs.iter().map(source).collect::<Result<Vec<_>, _>>()?, depth)?
            } else {
                let mut named = Vec::with_capacity(inputs.len());
                for i in inputs {
                    let name = i.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
                    named.push((name, source(i)?, i.get("widget").is_some()));
                }
                Raw::Real(RealNode {
                    class_type: ty.to_string(),
                    title: node.get("title").and_then(Value::as_str).map(String::from),
                    inputs: named,
                    widgets: node.get("widgets_values").cloned().unwrap_or(Value::Null),
                })
            };
            self.order.push(full.clone());
            self.raw.insert(full, raw);
        }
        Ok(())
    }

    /// Expands a subgraph instance; the instance itself becomes a pass-through whose outputs
    /// are what feeds the definition's output node (−20).
    fn instance(
        &mut self,
        node: &Value,
        def: &'a Value,
        full: &str,
        sources: &[Src],
        depth: usize,
    ) -> Result<Raw, WorkflowError> {
        let slots = |k: &str| def.get(k).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        let names = |v: &[Value]| {
            v.iter().map(|i| i.get("name").and_then(Value::as_str).unwrap_or_default().to_string()).collect::<Vec<_>>()
        };
        let instance_inputs = node.get("inputs").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        let instance_names = names(instance_inputs);
        // Promoted widgets: `proxyWidgets` pairs (inner node id, widget) with the instance's
        // `widgets_values` when it has them; id "-1" is the subgraph input of that name.
        let mut promoted: HashMap<String, Value> = HashMap::new();
        if let (Some(Value::Array(proxies)), Some(Value::Array(values))) =
            (node.pointer("/properties/proxyWidgets"), node.get("widgets_values"))
        {
            for (p, v) in proxies.iter().zip(values) {
                let (Some(inner), Some(widget)) = (id_of(p.get(0)), p.get(1).and_then(Value::as_str)) else { continue };
                if widget.starts_with("$$") {
                    continue;
                }
                if inner == "-1" {
                    promoted.insert(widget.to_string(), v.clone());
                } else {
                    self.overrides.entry(format!("{full}:{inner}")).or_default().push((widget.to_string(), v.clone()));
                }
            }
        }
        let declared = names(slots("inputs"));
        // Inputs match by name; by position only where the instance lists every input (an
        // instance listing fewer, such as FLUX.2 [klein]'s template, would bind the wrong one).
        let positional = instance_names.len() == declared.len();
        let bound: Vec<Src> = declared
            .iter()
            .enumerate()
            .map(|(j, name)| {
                let at = instance_names.iter().position(|n| n == name).or(positional.then_some(j));
                match at.and_then(|a| sources.get(a).cloned()).unwrap_or(Src::None) {
                    Src::None => promoted.get(name).cloned().map_or(Src::None, Src::Value),
                    s => s,
                }
            })
            .collect();
        let lvl = level(def, full)?;
        let prefix = format!("{full}:");
        self.expand(&lvl, &prefix, &bound, depth + 1)?;
        let mut outs = vec![Src::None; slots("outputs").len()];
        for (from, slot, to, to_slot) in lvl.links.values() {
            if to == "-20" && *to_slot < outs.len() {
                outs[*to_slot] = if from == "-10" {
                    bound.get(*slot).cloned().unwrap_or(Src::None)
                } else {
                    Src::From(format!("{prefix}{from}"), *slot)
                };
            }
        }
        Ok(Raw::Pass(outs))
    }

    /// Follows pass-throughs to a real node's output, a value, or nothing.
    fn resolve(&self, mut src: Src, at: &str, input: &str) -> Result<Src, WorkflowError> {
        for _ in 0..=self.raw.len() {
            let Src::From(id, slot) = &src else { return Ok(src) };
            match self.raw.get(id) {
                Some(Raw::Real(_)) => return Ok(src),
                Some(Raw::Pass(outs)) => src = outs.get(*slot).cloned().unwrap_or(Src::None),
                None => {
                    let msg = format!("links to node {id}, which is not in the workflow");
                    return Err(WorkflowError::at(at, format!("inputs.{input}"), msg));
                }
            }
        }
        Err(WorkflowError::at(at, format!("inputs.{input}"), "its link runs in a cycle of reroutes or bypassed nodes"))
    }

    fn finish(mut self, schemas: &Schemas) -> Result<Workflow, WorkflowError> {
        let mut nodes = Vec::new();
        for id in &self.order {
            let Some(Raw::Real(r)) = self.raw.get(id) else { continue };
            let mut inputs = BTreeMap::new();
            let mut unnamed = Vec::new();
            match (&r.widgets, schemas.get(&r.class_type)) {
                (Value::Array(values), Some(schema)) => {
                    inputs.extend(schema.name_widgets(values).into_iter().map(|(k, v)| (k, Input::Value(v))))
                }
                (Value::Array(values), None) => unnamed.clone_from(values),
                (Value::Object(m), _) => inputs.extend(m.iter().map(|(k, v)| (k.clone(), Input::Value(v.clone())))),
                _ => {}
            }
            for (name, v) in self.overrides.remove(id).unwrap_or_default() {
                inputs.insert(name, Input::Value(v));
            }
            for (name, src, _widget) in &r.inputs {
                match self.resolve(src.clone(), id, name)? {
                    Src::From(node, output) => {
                        inputs.insert(name.clone(), Input::Link { node, output });
                    }
                    Src::Value(v) => {
                        inputs.insert(name.clone(), Input::Value(v));
                    }
                    // Unconnected: a widget keeps the value it was given above.
                    Src::None => {}
                }
            }
            nodes.push(Node {
                id: id.clone(),
                class_type: r.class_type.clone(),
                title: r.title.clone(),
                inputs,
                unnamed,
            });
        }
        Ok(Workflow { nodes })
    }
}
