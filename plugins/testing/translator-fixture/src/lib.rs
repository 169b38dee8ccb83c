//! A third party's translator, as a test fixture: `FancyPromptEncode` (a made-up custom node
//! that styles its text before encoding it) becomes the core `encode.text` stage. Loaded by
//! hash beside the core pack, it makes workflows with that node compile, with no change to
//! the engine.

use fastvideo_plugin_sdk::{ComfyNode, GraphNode, WorkflowTranslator};
use serde_json::{json, Value};

struct Fancy;

impl WorkflowTranslator for Fancy {
    fn handles() -> Vec<String> {
        vec!["FancyPromptEncode".into()]
    }

    fn declare() -> String {
        json!({
            "FancyPromptEncode": {
                "input": { "required": {
                    "clip": ["CLIP", {}],
                    "text": ["STRING", { "multiline": true }],
                    "style": ["COMBO", { "options": ["plain", "shout"] }],
                } },
                "input_order": { "required": ["clip", "text", "style"] },
                "output": ["CONDITIONING"],
                "output_name": ["CONDITIONING"],
                "name": "FancyPromptEncode",
                "display_name": "Fancy Prompt Encode",
                "category": "conditioning",
            }
        })
        .to_string()
    }

    fn translate(node: ComfyNode) -> Result<Vec<GraphNode>, String> {
        let get = |name: &str| -> Result<Value, String> {
            let i = node.inputs.iter().find(|i| i.name == name).ok_or(format!("`{name}` is missing"))?;
            serde_json::from_str(&i.value_json).map_err(|e| e.to_string())
        };
        let clip = get("clip")?;
        let clip_ref = clip.get("$ref").and_then(Value::as_str).ok_or("`clip` must be connected")?.to_string();
        let text = get("text")?;
        let text = text.as_str().ok_or("`text` must be text (not connected)")?;
        let text = match get("style")?.as_str() {
            Some("shout") => format!("{}!", text.to_uppercase()),
            Some("plain") => text.to_string(),
            other => return Err(format!("unknown style {other:?}")),
        };
        Ok(vec![GraphNode {
            name: node.id.clone(),
            stage: "encode.text".into(),
            inputs: vec![clip_ref],
            outputs: vec![format!("{}.0", node.id)],
            params_json: json!({ "text": text, "text_encoder": clip }).to_string(),
        }])
    }
}

fastvideo_plugin_sdk::export_workflow_translator!(Fancy);
fastvideo_plugin_sdk::manifest! {
    name: "fancy-prompt",
    version: "0.1.0",
    kind: workflow_translator,
    hooks: [translate],
    distribution_altering: false,
    description: "test fixture: translates the made-up FancyPromptEncode node",
    params_schema: { "type": "object", "properties": {}, "additionalProperties": false },
}
