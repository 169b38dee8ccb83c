//! ComfyUI workflows on fastvideo. Both formats ComfyUI writes — the UI format the frontend
//! saves and the API format `/prompt` takes — become one normalized [`Workflow`]: executable
//! nodes with named inputs, each a link to another node's output or a value. Translators turn
//! it into a [`PipelineGraph`], which lowers to one [`RunPlan`] per sampler. Pictures and
//! videos a workflow loads stay file names until [`RunPlan::request`] reads them from ComfyUI's
//! input folder, resized as ComfyUI's nodes would ([`Resize`]), so a bad file is refused
//! naming its loader before the request is queued.
//!
//! ```
//! use fastvideo_comfy::{parse, Input, Schemas};
//!
//! let prompt = serde_json::json!({
//!     "3": { "class_type": "KSampler", "inputs": { "seed": 5, "model": ["4", 0] } },
//!     "4": { "class_type": "UNETLoader", "inputs": { "unet_name": "wan.safetensors" } },
//! });
//! let w = parse(&prompt, &Schemas::default()).unwrap();
//! assert_eq!(w.node("3").unwrap().inputs["model"], Input::Link { node: "4".into(), output: 0 });
//!
//! // A link to a node that is not there is an error naming the node and the input.
//! let bad = serde_json::json!({ "3": { "class_type": "KSampler", "inputs": { "model": ["9", 0] } } });
//! let e = parse(&bad, &Schemas::default()).unwrap_err();
//! assert_eq!((e.node.as_deref(), e.field.as_str()), (Some("3"), "inputs.model"));
//! ```

#![deny(missing_docs)]

mod compile;
mod coverage;
mod error;
mod graph;
mod lower;
mod math_expr;
mod media;
mod outputs;
mod pipeline_graph;
mod resample;
mod resize;
mod schema;
pub mod stages;
mod translate;
mod ui;

pub use compile::{compile, Compiled, Folders, WorkflowConfig};
pub use coverage::{Coverage, TypeCoverage, WorkflowCoverage};
pub use error::{CompileError, WorkflowError};
pub use graph::{parse_api, Input, Node, Workflow};
pub use lower::{plan, ModelFile, OutputPlan, RunPlan};
pub use media::{input_path, ImagePlan, LoadedVideo, VideoPlan};
pub use outputs::{next_output, OutputName};
pub use pipeline_graph::PipelineGraph;
pub use resample::{resample, Method};
pub use resize::{Anchor, Fit, Resize};
pub use schema::{InputDecl, NodeSchema, Schemas};
pub use translate::{as_ref, value_name, value_ref, ComfyNode, GraphNode, Translator, Translators};
pub use ui::parse_ui;

use serde_json::Value;

/// Which of ComfyUI's two formats a file is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The frontend's saved workflow (`nodes`, `links`, `definitions`).
    Ui,
    /// The `/prompt` format (`{"id": {"class_type", "inputs"}}`), bare or as `{"prompt": …}`.
    Api,
}

/// Tells the format apart, or says why it is neither.
pub fn format_of(v: &Value) -> Result<Format, WorkflowError> {
    let Some(obj) = v.as_object() else { return Err(WorkflowError::top("", "a workflow is a JSON object")) };
    if obj.get("nodes").is_some_and(Value::is_array) {
        return Ok(Format::Ui);
    }
    let prompt = obj.get("prompt").and_then(Value::as_object).unwrap_or(obj);
    if !prompt.is_empty() && prompt.values().all(|n| n.get("class_type").is_some()) {
        return Ok(Format::Api);
    }
    Err(WorkflowError::top(
        "",
        "neither a UI workflow (`nodes`, `links`) nor an API prompt (`{\"id\": {\"class_type\", \"inputs\"}}`)",
    ))
}

/// Parses either format; `schemas` names the widget values of UI-format nodes.
pub fn parse(v: &Value, schemas: &Schemas) -> Result<Workflow, WorkflowError> {
    match format_of(v)? {
        Format::Ui => parse_ui(v, schemas),
        Format::Api => {
            let obj = v.as_object().expect("checked by format_of");
            parse_api(obj.get("prompt").and_then(Value::as_object).unwrap_or(obj))
        }
    }
}

/// The node schemas of the first-party core translator pack
/// (`plugins/translators/comfy-core/object_info.json`): loaders, text encode, the samplers,
/// empty latents, VAE, image and video loading and resizing, video and image output,
/// primitives.
pub fn core_pack_schemas() -> Schemas {
    pack_schemas(include_str!("../../../plugins/translators/comfy-core/object_info.json"))
}

/// The schemas of every first-party translator pack: the core pack, the Wan pack
/// (`comfy-wan`: Wan's image-to-video nodes), the KJNodes pack (`comfy-kjnodes`: its image
/// resize nodes), and the FLUX.2, Qwen-Image and LTX-2 packs (`comfy-flux2`, `comfy-qwenimage`,
/// `comfy-ltx2`). What
/// `fastvideo workflow parse` names widget values with.
pub fn first_party_schemas() -> Schemas {
    let mut s = core_pack_schemas();
    s.extend(pack_schemas(include_str!("../../../plugins/translators/comfy-wan/object_info.json")));
    s.extend(pack_schemas(include_str!("../../../plugins/translators/comfy-kjnodes/object_info.json")));
    s.extend(pack_schemas(include_str!("../../../plugins/translators/comfy-flux2/object_info.json")));
    s.extend(pack_schemas(include_str!("../../../plugins/translators/comfy-qwenimage/object_info.json")));
    s.extend(pack_schemas(include_str!("../../../plugins/translators/comfy-ltx2/object_info.json")));
    s
}

fn pack_schemas(object_info: &str) -> Schemas {
    let info: Value = serde_json::from_str(object_info).expect("a first-party pack's object_info.json is JSON");
    Schemas::from_object_info(&info).expect("a first-party pack's object_info.json is valid")
}
