//! The FLUX.2 translator pack: ComfyUI's FLUX.2 nodes as pipeline stages.
//! `EmptyFlux2LatentImage` is the picture's empty latent (its size), `Flux2Scheduler` the
//! schedule shifted by the picture's size (what a FLUX.2 folder's scheduler computes), and
//! `ReferenceLatent` conditions the text on a VAE-encoded reference picture (an edit). Node
//! schemas are `object_info.json` (ComfyUI's declarations).

use fastvideo_plugin_sdk::{comfy, ComfyNode, GraphNode, WorkflowTranslator};
use serde_json::json;

const OBJECT_INFO: &str = include_str!("../object_info.json");

/// The stage, how many values it makes, and stage parameter ← ComfyUI input, per node type.
fn rule(class_type: &str) -> Option<comfy::StageRule> {
    Some(match class_type {
        "EmptyFlux2LatentImage" => {
            ("latent.empty", 1, &[("width", "width"), ("height", "height"), ("batch", "batch_size")][..])
        }
        "Flux2Scheduler" => ("schedule.flux2", 1, &[("steps", "steps"), ("width", "width"), ("height", "height")][..]),
        "ReferenceLatent" => ("condition.reference", 1, &[("conditioning", "conditioning"), ("latent", "latent")][..]),
        _ => return None,
    })
}

struct Flux2;

impl WorkflowTranslator for Flux2 {
    fn handles() -> Vec<String> {
        comfy::handles(OBJECT_INFO)
    }

    fn declare() -> String {
        OBJECT_INFO.to_string()
    }

    fn translate(node: ComfyNode) -> Result<Vec<GraphNode>, String> {
        let (stage, outputs, params) =
            rule(&node.class_type).ok_or_else(|| format!("not a FLUX.2 node: {}", node.class_type))?;
        let mut p = comfy::params(&node, params)?;
        if stage == "schedule.flux2" {
            p.insert("scheduler".into(), json!("flux2"));
        }
        Ok(vec![comfy::graph_node(&node, stage, outputs, p)])
    }
}

fastvideo_plugin_sdk::export_workflow_translator!(Flux2);
fastvideo_plugin_sdk::manifest! {
    name: "comfy-flux2",
    version: "0.1.0",
    kind: workflow_translator,
    hooks: [translate],
    distribution_altering: false,
    description: "ComfyUI FLUX.2 nodes: EmptyFlux2LatentImage, Flux2Scheduler, ReferenceLatent (edits)",
    params_schema: { "type": "object", "properties": {}, "additionalProperties": false },
}
