use fastvideo_comfy::Schemas;

/// The node schemas the core translator pack declares (its `object_info.json`).
pub fn core_schemas() -> Schemas {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../plugins/translators/comfy-core/object_info.json");
    let text = std::fs::read_to_string(path).unwrap();
    Schemas::from_object_info(&serde_json::from_str(&text).unwrap()).unwrap()
}
