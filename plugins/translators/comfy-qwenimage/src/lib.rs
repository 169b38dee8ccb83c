//! The Qwen-Image translator pack: ComfyUI's Qwen-Image nodes as pipeline stages.
//! `TextEncodeQwenImageEdit` / `TextEncodeQwenImageEditPlus` encode the prompt with the
//! pictures to edit (one, or up to three), which the model also takes as reference latents;
//! `CFGNorm` rescales the guided prediction to the conditional one's norm (what Qwen-Image's
//! true CFG does); `FluxKontextMultiReferenceLatentMethod` says how reference latents are
//! placed. Node schemas are `object_info.json` (ComfyUI's declarations).

use fastvideo_plugin_sdk::{comfy, ComfyNode, GraphNode, WorkflowTranslator};

const OBJECT_INFO: &str = include_str!("../object_info.json");

/// The stage, how many values it makes, and stage parameter ← ComfyUI input, per node type.
fn rule(class_type: &str) -> Option<comfy::StageRule> {
    const EDIT: [(&str, &str); 6] = [
        ("text_encoder", "clip"),
        ("text", "prompt"),
        ("vae", "vae"),
        ("image1", "image1"),
        ("image2", "image2"),
        ("image3", "image3"),
    ];
    Some(match class_type {
        "TextEncodeQwenImageEditPlus" => ("encode.text_edit", 1, &EDIT[..]),
        "TextEncodeQwenImageEdit" => (
            "encode.text_edit",
            1,
            &[("text_encoder", "clip"), ("text", "prompt"), ("vae", "vae"), ("image1", "image")][..],
        ),
        "CFGNorm" => ("model.cfg_norm", 1, &[("model", "model"), ("strength", "strength")][..]),
        "FluxKontextMultiReferenceLatentMethod" => (
            "condition.reference_method",
            1,
            &[("conditioning", "conditioning"), ("method", "reference_latents_method")][..],
        ),
        _ => return None,
    })
}

struct QwenImage;

impl WorkflowTranslator for QwenImage {
    fn handles() -> Vec<String> {
        comfy::handles(OBJECT_INFO)
    }

    fn declare() -> String {
        OBJECT_INFO.to_string()
    }

    fn translate(node: ComfyNode) -> Result<Vec<GraphNode>, String> {
        let (stage, outputs, params) =
            rule(&node.class_type).ok_or_else(|| format!("not a Qwen-Image node: {}", node.class_type))?;
        Ok(vec![comfy::graph_node(&node, stage, outputs, comfy::params(&node, params)?)])
    }
}

fastvideo_plugin_sdk::export_workflow_translator!(QwenImage);
fastvideo_plugin_sdk::manifest! {
    name: "comfy-qwenimage",
    version: "0.1.0",
    kind: workflow_translator,
    hooks: [translate],
    distribution_altering: false,
    description: "ComfyUI Qwen-Image nodes: TextEncodeQwenImageEdit(Plus), CFGNorm, FluxKontextMultiReferenceLatentMethod",
    params_schema: { "type": "object", "properties": {}, "additionalProperties": false },
}
