//! The Wan translator pack: ComfyUI's Wan-specific nodes as pipeline stages.
//! `WanImageToVideo` and `WanFirstLastFrameToVideo` condition the text on a start (and end)
//! picture and give the latent's size: `condition.image_to_video`. Wan 2.2's
//! `Wan22ImageToVideoLatent` is text to video's empty latent without a start image and an
//! image-to-video latent with one. Node schemas are `object_info.json` (ComfyUI's declarations).

use fastvideo_plugin_sdk::{ComfyNode, GraphNode, WorkflowTranslator};
use serde_json::{Map, Value};

const OBJECT_INFO: &str = include_str!("../object_info.json");

/// Stage parameter ← ComfyUI input, per node type; inputs not listed (none today) are ignored.
fn params(class_type: &str) -> &'static [(&'static str, &'static str)] {
    const SIZE: [(&str, &str); 4] =
        [("width", "width"), ("height", "height"), ("frames", "length"), ("batch", "batch_size")];
    match class_type {
        "WanImageToVideo" => &[
            ("positive", "positive"),
            ("negative", "negative"),
            ("vae", "vae"),
            SIZE[0],
            SIZE[1],
            SIZE[2],
            SIZE[3],
            ("clip_vision", "clip_vision_output"),
            ("start_image", "start_image"),
        ],
        "WanFirstLastFrameToVideo" => &[
            ("positive", "positive"),
            ("negative", "negative"),
            ("vae", "vae"),
            SIZE[0],
            SIZE[1],
            SIZE[2],
            SIZE[3],
            ("clip_vision", "clip_vision_start_image"),
            ("clip_vision_end", "clip_vision_end_image"),
            ("start_image", "start_image"),
            ("end_image", "end_image"),
        ],
        _ => &[("vae", "vae"), SIZE[0], SIZE[1], SIZE[2], SIZE[3], ("start_image", "start_image")],
    }
}

/// `{"$ref": NAME}`'s NAME.
fn ref_name(v: &Value) -> Option<&str> {
    v.as_object().filter(|o| o.len() == 1)?.get("$ref")?.as_str()
}

struct Wan;

impl WorkflowTranslator for Wan {
    fn handles() -> Vec<String> {
        let info: Value = serde_json::from_str(OBJECT_INFO).expect("object_info.json is JSON");
        info.as_object().map(|m| m.keys().cloned().collect()).unwrap_or_default()
    }

    fn declare() -> String {
        OBJECT_INFO.to_string()
    }

    fn translate(node: ComfyNode) -> Result<Vec<GraphNode>, String> {
        let mut p = Map::new();
        for (param, input) in params(&node.class_type) {
            let Some(i) = node.inputs.iter().find(|i| i.name == *input) else { continue };
            let v: Value = serde_json::from_str(&i.value_json).map_err(|e| format!("input `{input}`: {e}"))?;
            if !v.is_null() {
                p.insert(param.to_string(), v);
            }
        }
        let (stage, outputs) = match node.class_type.as_str() {
            "WanImageToVideo" | "WanFirstLastFrameToVideo" => ("condition.image_to_video", 3),
            "Wan22ImageToVideoLatent" if p.contains_key("start_image") => ("latent.image_to_video", 1),
            "Wan22ImageToVideoLatent" => {
                // The latent's size comes from the VAE's strides, which this runtime knows itself.
                p.remove("vae");
                ("latent.empty", 1)
            }
            other => return Err(format!("not a Wan node: {other}")),
        };
        // Every link the parameters hold (sizes may come from primitives or resize nodes).
        let inputs = p.values().filter_map(ref_name).map(String::from).collect();
        Ok(vec![GraphNode {
            name: node.id.clone(),
            stage: stage.into(),
            inputs,
            outputs: (0..outputs).map(|k| format!("{}.{k}", node.id)).collect(),
            params_json: Value::Object(p).to_string(),
        }])
    }
}

fastvideo_plugin_sdk::export_workflow_translator!(Wan);
fastvideo_plugin_sdk::manifest! {
    name: "comfy-wan",
    version: "0.2.0",
    kind: workflow_translator,
    hooks: [translate],
    distribution_altering: false,
    description: "ComfyUI Wan nodes: WanImageToVideo, WanFirstLastFrameToVideo (image to video), Wan22ImageToVideoLatent",
    params_schema: { "type": "object", "properties": {}, "additionalProperties": false },
}
