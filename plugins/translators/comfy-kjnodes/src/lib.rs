//! A third-party node pack's translator: ComfyUI-KJNodes' image resize nodes, which image-to-
//! video workflows put between `LoadImage` and the model. Each becomes an `image.resize`
//! stage; their `width` / `height` outputs (often wired into `WanImageToVideo`) become
//! literals when the size does not depend on the picture (stretch or crop to a given size).
//! Padding modes are refused by name. Node schemas are `object_info.json` (KJNodes'
//! declarations).

use fastvideo_plugin_sdk::{ComfyNode, GraphNode, WorkflowTranslator};
use serde_json::{json, Map, Value};

const OBJECT_INFO: &str = include_str!("../object_info.json");

fn ref_name(v: &Value) -> Option<&str> {
    v.as_object().filter(|o| o.len() == 1)?.get("$ref")?.as_str()
}

/// The node's inputs by name, parsed.
struct Inputs(Vec<(String, Value)>);

impl Inputs {
    fn of(node: &ComfyNode) -> Result<Self, String> {
        let parse = |i: &fastvideo_plugin_sdk::NodeInput| {
            serde_json::from_str(&i.value_json)
                .map(|v| (i.name.clone(), v))
                .map_err(|e| format!("input `{}`: {e}", i.name))
        };
        Ok(Inputs(node.inputs.iter().map(parse).collect::<Result<_, _>>()?))
    }

    fn get(&self, name: &str) -> Option<&Value> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| v).filter(|v| !v.is_null())
    }

    fn text(&self, name: &str, default: &str) -> String {
        self.get(name).and_then(Value::as_str).unwrap_or(default).to_string()
    }
}

/// The resize stage, plus literal width/height outputs when the size is `fixed` (known without
/// the picture). `zero_keeps_aspect`: whether a side of 0 follows the other side's scale
/// (version 1 keeping proportions) or is the picture's own.
fn fragments(id: &str, mut params: Map<String, Value>, fixed: bool, zero_keeps_aspect: bool) -> Vec<GraphNode> {
    params.insert("zero_keeps_aspect".into(), json!(zero_keeps_aspect));
    let inputs = params.values().filter_map(ref_name).map(String::from).collect();
    let mut out = Vec::new();
    let side = |k: &str| params.get(k).and_then(Value::as_u64).filter(|&v| v > 0);
    let div = params.get("divisible_by").and_then(Value::as_u64).filter(|&d| d > 1).unwrap_or(1);
    if let (true, Some(w), Some(h)) = (fixed, side("width"), side("height")) {
        for (k, v) in [(1, w - w % div), (2, h - h % div)] {
            out.push(GraphNode {
                name: format!("{id}.size{k}"),
                stage: "value".into(),
                inputs: Vec::new(),
                outputs: vec![format!("{id}.{k}")],
                params_json: json!({ "value": v }).to_string(),
            });
        }
    }
    out.insert(
        0,
        GraphNode {
            name: id.to_string(),
            stage: "image.resize".into(),
            inputs,
            outputs: vec![format!("{id}.0")],
            params_json: Value::Object(params).to_string(),
        },
    );
    out
}

fn common(i: &Inputs) -> Map<String, Value> {
    let mut p = Map::new();
    for (param, input) in [
        ("images", "image"),
        ("width", "width"),
        ("height", "height"),
        ("method", "upscale_method"),
        ("divisible_by", "divisible_by"),
    ] {
        if let Some(v) = i.get(input) {
            p.insert(param.into(), v.clone());
        }
    }
    p
}

struct KjNodes;

impl WorkflowTranslator for KjNodes {
    fn handles() -> Vec<String> {
        vec!["ImageResizeKJv2".into(), "ImageResizeKJ".into()]
    }

    fn declare() -> String {
        OBJECT_INFO.to_string()
    }

    fn translate(node: ComfyNode) -> Result<Vec<GraphNode>, String> {
        let i = Inputs::of(&node)?;
        let mut p = common(&i);
        let (fixed, keep) = match node.class_type.as_str() {
            "ImageResizeKJv2" => {
                let fit = match i.text("keep_proportion", "stretch").as_str() {
                    "stretch" => "stretch",
                    "resize" => "contain",
                    "crop" => "crop",
                    other => {
                        return Err(format!(
                            "keep_proportion `{other}`: padding and pixel budgets are not supported; use stretch, resize or crop"
                        ))
                    }
                };
                p.insert("fit".into(), json!(fit));
                p.insert("anchor".into(), json!(i.text("crop_position", "center")));
                (fit != "contain", false)
            }
            "ImageResizeKJ" => {
                if i.get("get_image_size").is_some() {
                    return Err(
                        "get_image_size: sizing from another picture is not supported; set width and height".into()
                    );
                }
                let keep = i.get("keep_proportion").and_then(Value::as_bool).unwrap_or(false);
                // `0` is the old frontend's placeholder for a center crop.
                let crop = i.get("crop").is_some_and(|c| c.as_str() == Some("center") || c.as_i64() == Some(0));
                let fit = if keep {
                    "contain"
                } else if crop {
                    "crop"
                } else {
                    "stretch"
                };
                p.insert("fit".into(), json!(fit));
                (!keep, keep)
            }
            other => return Err(format!("not a KJNodes resize node: {other}")),
        };
        Ok(fragments(&node.id, p, fixed, keep))
    }
}

fastvideo_plugin_sdk::export_workflow_translator!(KjNodes);
fastvideo_plugin_sdk::manifest! {
    name: "comfy-kjnodes",
    version: "0.1.0",
    kind: workflow_translator,
    hooks: [translate],
    distribution_altering: false,
    description: "ComfyUI-KJNodes image resize: ImageResizeKJv2, ImageResizeKJ (stretch, keep proportion, crop; no padding)",
    params_schema: { "type": "object", "properties": {}, "additionalProperties": false },
}
