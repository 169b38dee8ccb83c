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

/// What the `switch` and `math` nodes make, resolved from literals: a switch's value is its
/// `on_true` or its `on_false` (a literal, or a reference to another node's value), as its
/// `switch` says; a math node's are its expression's float and int results. Both need fixed
/// inputs (widgets, primitives, or other such nodes); they are resolved in rounds until nothing
/// changes, and what is left is refused by node.
fn fixed(nodes: &[GraphNode], literals: &HashMap<String, Value>) -> Result<HashMap<String, Value>, CompileError> {
    let pending: Vec<&GraphNode> = nodes.iter().filter(|n| n.stage == "switch" || n.stage == "math").collect();
    let by_output: HashMap<&str, &GraphNode> =
        nodes.iter().flat_map(|n| n.outputs.iter().map(move |o| (o.as_str(), n))).collect();
    let mut known = literals.clone();
    let mut made: HashMap<String, Value> = HashMap::new();
    let mut done = vec![false; pending.len()];
    loop {
        let mut progress = false;
        // `GetImageSize` of a picture the graph makes (`EmptyImage`, then resizes by a factor or
        // to a size): known now, so what reads it (a latent's size) is too.
        for n in nodes.iter().filter(|n| n.stage == "image.size") {
            if made.contains_key(&n.outputs[0]) {
                continue;
            }
            let Some(src) = n.params.get("images").and_then(as_ref) else { continue };
            if let Some((w, h)) = image_dims(src, &by_output, &known, 0) {
                for (name, v) in n.outputs.iter().zip([w, h, 1]) {
                    made.insert(name.clone(), serde_json::json!(v));
                    known.insert(name.clone(), serde_json::json!(v));
                }
                progress = true;
            }
        }
        for k in 0..pending.len() {
            if done[k] {
                continue;
            }
            let n = pending[k];
            let mut p = n.params.clone();
            fold(&mut p, &known, &mut Vec::new());
            let Some(values) = resolve(n, &p)? else { continue };
            for (name, v) in n.outputs.iter().zip(values) {
                made.insert(name.clone(), v.clone());
                known.insert(name.clone(), v);
            }
            done[k] = true;
            progress = true;
        }
        if !progress {
            break;
        }
    }
    // A switch that picked another switch's or math node's value: follow it to the end.
    let names: Vec<String> = made.keys().cloned().collect();
    for name in names {
        let mut v = made[&name].clone();
        for _ in 0..=made.len() {
            match as_ref(&v).and_then(|r| made.get(r)) {
                Some(next) => v = next.clone(),
                None => break,
            }
        }
        if as_ref(&v).is_some_and(|r| made.contains_key(r)) {
            return Err(CompileError::Graph(format!("switches pick each other in a loop (`{name}`)")));
        }
        made.insert(name, v);
    }
    if let Some((_, n)) = pending.iter().enumerate().find(|(k, _)| !done[*k]) {
        let msg = match n.stage.as_str() {
            "switch" => {
                "`switch` must be a fixed true or false (a widget or a primitive), not a value the graph computes"
            }
            _ => "the expression's inputs must be fixed numbers (widgets or primitives), not values the graph computes",
        };
        return Err(CompileError::node(&n.origin, msg));
    }
    Ok(made)
}

/// Width and height of the picture `name` when the graph makes it from fixed numbers: an
/// `image.empty`, through `image.resize` nodes by a factor (ComfyUI rounds each side) or to a
/// fixed size.
fn image_dims(
    name: &str,
    by_output: &HashMap<&str, &GraphNode>,
    known: &HashMap<String, Value>,
    depth: usize,
) -> Option<(i64, i64)> {
    let n = by_output.get(name)?;
    let mut p = n.params.clone();
    fold(&mut p, known, &mut Vec::new());
    let num = |k: &str| p.get(k).and_then(Value::as_f64);
    match n.stage.as_str() {
        "image.empty" => Some((num("width")? as i64, num("height")? as i64)),
        "image.resize" if depth < 32 => {
            let (w, h) = image_dims(p.get("images").and_then(as_ref)?, by_output, known, depth + 1)?;
            match (num("scale"), num("width"), num("height"), p.get("mode")) {
                (Some(s), _, _, None) => Some(((w as f64 * s).round() as i64, (h as f64 * s).round() as i64)),
                (None, Some(nw), Some(nh), None) if nw > 0.0 && nh > 0.0 && p.get("megapixels").is_none() => {
                    Some((nw as i64, nh as i64))
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// One switch or math node's values once its parameters `p` are literal, `None` while they
/// still read other nodes.
fn resolve(n: &GraphNode, p: &Value) -> Result<Option<Vec<Value>>, CompileError> {
    if n.stage == "switch" {
        let Some(on) = p.get("switch").and_then(Value::as_bool) else { return Ok(None) };
        let key = if on { "on_true" } else { "on_false" };
        let picked = p.get(key).cloned().unwrap_or(Value::Null);
        if picked.is_null() {
            return Err(CompileError::node(&n.origin, format!("`{key}` is not connected, and the switch is {on}")));
        }
        // A pick that reads another switch or math node waits for it.
        return Ok(Some(vec![picked]));
    }
    let Some(expr) = p.get("expression").and_then(Value::as_str) else {
        return Err(CompileError::node(&n.origin, "`expression` must be text"));
    };
    let mut vars = HashMap::new();
    for name in ["a", "b", "c", "d", "e", "f"] {
        match p.get(name) {
            None | Some(Value::Null) => {}
            Some(v) if as_ref(v).is_some() => return Ok(None),
            Some(Value::Bool(b)) => drop(vars.insert(name.to_string(), crate::math_expr::Num::Int(i64::from(*b)))),
            Some(Value::Number(x)) => {
                let num = match x.as_i64() {
                    Some(i) => crate::math_expr::Num::Int(i),
                    None => crate::math_expr::Num::Float(x.as_f64().unwrap_or(f64::NAN)),
                };
                vars.insert(name.to_string(), num);
            }
            Some(other) => return Err(CompileError::node(&n.origin, format!("`{name}` = {other} is not a number"))),
        }
    }
    let v = crate::math_expr::eval(expr, &vars).map_err(|e| CompileError::node(&n.origin, format!("`{expr}`: {e}")))?;
    let f = v.as_f64();
    let int = match v {
        crate::math_expr::Num::Int(i) => i,
        crate::math_expr::Num::Float(x) => x.trunc() as i64,
    };
    Ok(Some(vec![serde_json::json!(f), serde_json::json!(int)]))
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
        let aliases = fixed(&nodes, &literals)?;
        let mut literals = literals;
        // Literal nodes, and picture sizes known now, are folded away.
        let mut nodes: Vec<GraphNode> = nodes
            .into_iter()
            .filter(|n| !["value", "switch", "math"].contains(&n.stage.as_str()))
            .filter(|n| n.stage != "image.size" || !aliases.contains_key(&n.outputs[0]))
            .collect();
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
