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
