//! The translated fragments joined into one pipeline graph and checked before anything runs:
//! known stages, unique names, every reference produced and of the right type, no cycles.
//! Literal nodes (`value`) are folded into the parameters that read them.

use std::collections::HashMap;

use serde_json::Value;

use crate::stages::stage;
use crate::translate::{as_ref, GraphNode};
use crate::CompileError;

/// A checked pipeline graph, its nodes in an order where every node comes after what it reads.
#[derive(Debug, Clone, PartialEq)]
pub struct PipelineGraph {
    /// The nodes, topologically sorted.
    pub nodes: Vec<GraphNode>,
}

/// Replaces every reference to a folded literal in `v`; returns the references left.
fn fold(v: &mut Value, literals: &HashMap<String, Value>, left: &mut Vec<String>) {
    if let Some(name) = as_ref(v) {
        match literals.get(name) {
            // A switch's pick may be another node's value: that is then what `v` reads.
            Some(lit) => {
                *v = lit.clone();
                left.extend(as_ref(v).map(str::to_string));
            }
            None => left.push(name.to_string()),
        }
        return;
    }
    match v {
        Value::Array(items) => items.iter_mut().for_each(|i| fold(i, literals, left)),
        Value::Object(m) => m.values_mut().for_each(|i| fold(i, literals, left)),
        _ => {}
    }
}

/// What each `switch` node's value is: its `on_true` or its `on_false` (a literal, or a reference
/// to another node's value), as its `switch` says; that must be a fixed boolean (a widget or a
/// primitive). A switch picking another switch's value is followed to the end.
fn switches(nodes: &[GraphNode], literals: &HashMap<String, Value>) -> Result<HashMap<String, Value>, CompileError> {
    let mut picks: HashMap<String, Value> = HashMap::new();
    for n in nodes.iter().filter(|n| n.stage == "switch") {
        let mut p = n.params.clone();
        fold(&mut p, literals, &mut Vec::new());
        let Some(on) = p.get("switch").and_then(Value::as_bool) else {
            let msg =
                "`switch` must be a fixed true or false (a widget or a primitive), not a value the graph computes";
            return Err(CompileError::node(&n.origin, msg));
        };
        let picked = p.get(if on { "on_true" } else { "on_false" }).cloned().unwrap_or(Value::Null);
        if picked.is_null() {
            let msg = format!("`{}` is not connected, and the switch is {on}", if on { "on_true" } else { "on_false" });
            return Err(CompileError::node(&n.origin, msg));
        }
        picks.insert(n.outputs[0].clone(), picked);
    }
    // Switches of switches: follow each pick until it leaves the switches (a loop is an error).
    let names: Vec<String> = picks.keys().cloned().collect();
    for name in names {
        let mut v = picks[&name].clone();
        for _ in 0..=picks.len() {
            match as_ref(&v).and_then(|r| picks.get(r)) {
                Some(next) => v = next.clone(),
                None => break,
            }
        }
        if as_ref(&v).is_some_and(|r| picks.contains_key(r)) {
            return Err(CompileError::Graph(format!("switches pick each other in a loop (`{name}`)")));
        }
        picks.insert(name, v);
    }
    Ok(picks)
}

impl PipelineGraph {
    /// Checks and orders `nodes` (a workflow's fragments).
    pub fn build(nodes: Vec<GraphNode>) -> Result<Self, CompileError> {
        let mut names: HashMap<&str, &str> = HashMap::new();
        for n in &nodes {
            if let Some(other) = names.insert(&n.name, &n.origin) {
                return Err(CompileError::node(
                    &n.origin,
                    format!("graph node `{}` is also made by node {other}", n.name),
                ));
            }
            let Some(decl) = stage(&n.stage) else {
                return Err(CompileError::node(&n.origin, format!("unknown stage `{}`", n.stage)));
            };
            if n.outputs.len() != decl.outputs.len() {
                let msg = format!(
                    "stage `{}` makes {} values, the translation names {}",
                    n.stage,
                    decl.outputs.len(),
                    n.outputs.len()
                );
                return Err(CompileError::node(&n.origin, msg));
            }
            if !n.params.is_object() {
                return Err(CompileError::node(
                    &n.origin,
                    format!("graph node `{}`: params must be an object", n.name),
                ));
            }
        }
        // Literals: what a `value` node makes is its `value` parameter.
        let literals: HashMap<String, Value> = nodes
            .iter()
            .filter(|n| n.stage == "value")
            .map(|n| (n.outputs[0].clone(), n.params.get("value").cloned().unwrap_or(Value::Null)))
            .collect();
        let aliases = switches(&nodes, &literals)?;
        let mut literals = literals;
        let mut nodes: Vec<GraphNode> =
            nodes.into_iter().filter(|n| n.stage != "value" && n.stage != "switch").collect();
        // A switch's value is what it picks: a literal folds in, another node's value is read
        // from that node (its name replaces the switch's in the reader's inputs).
        for n in &mut nodes {
            n.inputs = n
                .inputs
                .iter()
                .filter_map(|i| match aliases.get(i) {
                    Some(v) => as_ref(v).map(str::to_string),
                    None => Some(i.clone()),
                })
                .collect();
        }
        literals.extend(aliases);
        let mut produced: HashMap<String, (usize, &'static str)> = HashMap::new();
        for (i, n) in nodes.iter().enumerate() {
            let decl = stage(&n.stage).expect("checked");
            for (name, ty) in n.outputs.iter().zip(decl.outputs) {
                if produced.insert(name.clone(), (i, ty)).is_some() || literals.contains_key(name) {
                    return Err(CompileError::node(&n.origin, format!("value `{name}` is made twice")));
                }
            }
        }
        let mut reads: Vec<Vec<usize>> = Vec::with_capacity(nodes.len());
        for n in &mut nodes {
            let mut refs = Vec::new();
            fold(&mut n.params, &literals, &mut refs);
            n.inputs.retain(|i| !literals.contains_key(i));
            let mut from = Vec::new();
            for r in &refs {
                let Some(&(j, _)) = produced.get(r) else {
                    let msg = match r.rsplit_once('.') {
                        Some((id, k)) => format!("reads output {k} of node {id}, which nothing produces (is node {id} translated to make it?)"),
                        None => format!("reads `{r}`, which nothing produces"),
                    };
                    return Err(CompileError::node(&n.origin, msg));
                };
                if !n.inputs.contains(r) {
                    return Err(CompileError::node(
                        &n.origin,
                        format!("graph node `{}` reads `{r}` without listing it in its inputs", n.name),
                    ));
                }
                from.push(j);
            }
            let decl = stage(&n.stage).expect("checked");
            for &(param, ty, required) in decl.refs {
                match n.params.get(param) {
                    None | Some(Value::Null) if !required => {}
                    None | Some(Value::Null) => {
                        return Err(CompileError::node(
                            &n.origin,
                            format!("`{}` needs its `{param}` input connected", n.stage),
                        ))
                    }
                    Some(v) => {
                        let got = as_ref(v).and_then(|r| produced.get(r)).map(|&(_, t)| t);
                        if got != Some(ty) {
                            let msg =
                                format!("`{param}` of `{}` takes {ty}, got {}", n.stage, got.unwrap_or("a literal"));
                            return Err(CompileError::node(&n.origin, msg));
                        }
                    }
                }
            }
            reads.push(from);
        }
        // Kahn's order; what is left over is a cycle.
        let mut indegree: Vec<usize> = reads.iter().map(Vec::len).collect();
        let mut readers: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
        for (i, r) in reads.iter().enumerate() {
            for &j in r {
                readers[j].push(i);
            }
        }
        let mut ready: Vec<usize> = (0..nodes.len()).filter(|&i| indegree[i] == 0).rev().collect();
        let mut order = Vec::with_capacity(nodes.len());
        while let Some(i) = ready.pop() {
            order.push(i);
            for &k in readers[i].iter().rev() {
                indegree[k] -= 1;
                if indegree[k] == 0 {
                    ready.push(k);
                }
            }
        }
        if let Some(stuck) = (0..nodes.len()).find(|&i| indegree[i] > 0) {
            return Err(CompileError::node(&nodes[stuck].origin, "is part of a cycle"));
        }
        let mut slots: Vec<Option<GraphNode>> = nodes.into_iter().map(Some).collect();
        Ok(PipelineGraph { nodes: order.into_iter().map(|i| slots[i].take().expect("each once")).collect() })
    }

    /// The node that makes `value`, and which of its outputs it is.
    pub fn producer(&self, value: &str) -> Option<(&GraphNode, usize)> {
        self.nodes.iter().find_map(|n| n.outputs.iter().position(|o| o == value).map(|k| (n, k)))
    }

    /// The graph as JSON (what `fastvideo workflow compile` prints).
    pub fn to_json(&self) -> Value {
        serde_json::to_value(&self.nodes).expect("graph nodes serialize")
    }
}
