use fastvideo_comfy::Schemas;

/// The node schemas the core translator pack declares (its `object_info.json`).
pub fn core_schemas() -> Schemas {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../plugins/translators/comfy-core/object_info.json");
    let text = std::fs::read_to_string(path).unwrap();
    Schemas::from_object_info(&serde_json::from_str(&text).unwrap()).unwrap()
}

/// A reference to output `k` of graph node `id`.
pub fn r(id: &str, k: usize) -> serde_json::Value {
    fastvideo_comfy::value_ref(&fastvideo_comfy::value_name(id, k))
}

/// A graph node as a translator makes it: every reference in `params` is an input.
pub fn node(id: &str, stage_name: &str, params: serde_json::Value) -> fastvideo_comfy::GraphNode {
    let inputs = params.as_object().unwrap().values().filter_map(fastvideo_comfy::as_ref).map(String::from).collect();
    let outputs = (0..fastvideo_comfy::stages::stage(stage_name).unwrap().outputs.len())
        .map(|k| fastvideo_comfy::value_name(id, k))
        .collect();
    fastvideo_comfy::GraphNode { name: id.into(), stage: stage_name.into(), inputs, outputs, params, origin: id.into() }
}

/// The first run `nodes` lower to.
pub fn lower(
    nodes: Vec<fastvideo_comfy::GraphNode>,
) -> Result<fastvideo_comfy::RunPlan, fastvideo_comfy::CompileError> {
    Ok(fastvideo_comfy::plan(&fastvideo_comfy::PipelineGraph::build(nodes)?)?.remove(0))
}

/// Sets `key` of graph node `id` to `v`, its inputs following the references.
pub fn set(nodes: &mut [fastvideo_comfy::GraphNode], id: &str, key: &str, v: serde_json::Value) {
    let n = nodes.iter_mut().find(|n| n.name == id).unwrap();
    n.params[key] = v;
    n.inputs = n.params.as_object().unwrap().values().filter_map(fastvideo_comfy::as_ref).map(String::from).collect();
}

/// Asserts `nodes` are refused naming `node`, the message containing `needle`.
pub fn refused(nodes: Vec<fastvideo_comfy::GraphNode>, node: &str, needle: &str) {
    let e = lower(nodes).unwrap_err().to_string();
    assert!(e.contains(&format!("node {node}")) && e.contains(needle), "{e}");
}
