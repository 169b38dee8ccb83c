//! The Wan translator pack: ComfyUI's Wan-specific nodes, as far as this runtime runs them.
//! Wan 2.2's `Wan22ImageToVideoLatent` without a start image is text to video's empty latent;
//! with one it is image to video, which is refused by name.

use fastvideo_plugin_sdk::{ComfyNode, GraphNode, WorkflowTranslator};
use serde_json::{json, Map, Value};

struct Wan;

impl WorkflowTranslator for Wan {
    fn handles() -> Vec<String> {
        vec!["Wan22ImageToVideoLatent".into()]
    }

    fn declare() -> String {
        let int = |default: i64, min: i64, step: i64| json!(["INT", {"default": default, "min": min, "max": 16384, "step": step}]);
        json!({
            "Wan22ImageToVideoLatent": {
                "input": {
                    "required": {
                        "vae": ["VAE", {}],
                        "width": int(1280, 32, 32),
                        "height": int(704, 32, 32),
                        "length": int(49, 1, 4),
                        "batch_size": ["INT", {"default": 1, "min": 1, "max": 4096}],
                    },
                    "optional": { "start_image": ["IMAGE", {}] },
                },
                "input_order": { "required": ["vae", "width", "height", "length", "batch_size"], "optional": ["start_image"] },
                "output": ["LATENT"],
                "output_name": ["LATENT"],
                "output_is_list": [false],
                "output_node": false,
                "name": "Wan22ImageToVideoLatent",
                "display_name": "Wan22ImageToVideoLatent",
                "category": "conditioning/inpaint",
                "description": "",
                "python_module": "fastvideo",
            }
        })
        .to_string()
    }

    fn translate(node: ComfyNode) -> Result<Vec<GraphNode>, String> {
        let mut params = Map::new();
        for i in &node.inputs {
            let v: Value = serde_json::from_str(&i.value_json).map_err(|e| format!("input `{}`: {e}", i.name))?;
            let key = match i.name.as_str() {
                "start_image" if !v.is_null() => {
                    return Err(
                        "start_image: image to video is not supported; leave it unconnected for text to video".into()
                    )
                }
                "width" | "height" => i.name.clone(),
                "length" => "frames".into(),
                "batch_size" => "batch".into(),
                // The latent's size comes from the VAE's strides, which this runtime knows itself.
                _ => continue,
            };
            if v.get("$ref").is_some() {
                return Err(format!("`{}` must be a value, not a link", i.name));
            }
            params.insert(key, v);
        }
        Ok(vec![GraphNode {
            name: node.id.clone(),
            stage: "latent.empty".into(),
            inputs: Vec::new(),
            outputs: vec![format!("{}.0", node.id)],
            params_json: Value::Object(params).to_string(),
        }])
    }
}

fastvideo_plugin_sdk::export_workflow_translator!(Wan);
fastvideo_plugin_sdk::manifest! {
    name: "comfy-wan",
    version: "0.1.0",
    kind: workflow_translator,
    hooks: [translate],
    distribution_altering: false,
    description: "ComfyUI Wan nodes: Wan22ImageToVideoLatent (text to video: no start image)",
    params_schema: { "type": "object", "properties": {}, "additionalProperties": false },
}
