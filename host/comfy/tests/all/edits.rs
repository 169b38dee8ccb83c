//! Edits, lowered: the graphs the FLUX.2 and Qwen-Image packs make for ComfyUI's edit templates
//! become `i2i` runs whose references are the pictures on the conditioning, in order, sized by
//! the picture the latent encodes; what the edit models cannot run is refused naming the node.

use fastvideo_comfy::GraphNode;
use fastvideo_request::{ImageRole, TaskType};
use serde_json::{json, Value};

use crate::common::{lower, node, r, refused, set};

/// Qwen-Image-Edit-Plus as the packs translate its template: two pictures on both branches,
/// the first scaled to a Kontext size and VAE-encoded as the latent, `CFGNorm` on the model.
fn qwen_edit() -> Vec<GraphNode> {
    vec![
        node("37", "load.diffusion_model", json!({"file": "qwen_image_edit_2509.safetensors"})),
        node("38", "load.text_encoder", json!({"file": "qwen_2.5_vl_7b.safetensors"})),
        node("39", "load.vae", json!({"file": "qwen_image_vae.safetensors"})),
        node("75", "model.cfg_norm", json!({"model": r("37", 0), "strength": 1.0})),
        node("78", "load.image", json!({"file": "cat.png"})),
        node("79", "load.image", json!({"file": "hat.png"})),
        node("117", "image.resize", json!({"images": r("78", 0), "kontext": true, "method": "lanczos", "fit": "crop"})),
        node(
            "111",
            "encode.text_edit",
            json!({"text_encoder": r("38", 0), "vae": r("39", 0), "text": "put the hat on the cat",
                   "image1": r("117", 0), "image2": r("79", 0)}),
        ),
        node(
            "110",
            "encode.text_edit",
            json!({"text_encoder": r("38", 0), "vae": r("39", 0), "text": "", "image1": r("117", 0), "image2": r("79", 0)}),
        ),
        node("88", "encode.vae", json!({"images": r("117", 0), "vae": r("39", 0)})),
        node(
            "3",
            "sample",
            json!({"model": r("75", 0), "positive": r("111", 0), "negative": r("110", 0), "latent": r("88", 0),
                   "seed": 5, "steps": 4, "cfg": 2.5, "sampler": "euler", "scheduler": "simple", "denoise": 1.0}),
        ),
        node("8", "decode.vae", json!({"latent": r("3", 0), "vae": r("39", 0)})),
        node("60", "output.image", json!({"images": r("8", 0), "prefix": "ComfyUI", "format": "png"})),
    ]
}

#[test]
fn an_edit_takes_the_conditioning_pictures_as_references_sized_by_the_encoded_one() {
    let run = lower(qwen_edit()).unwrap();
    assert_eq!(run.task, TaskType::I2i);
    assert_eq!((run.prompt.as_str(), run.negative.as_deref()), ("put the hat on the cat", Some("")));
    let refs: Vec<(&str, ImageRole, usize)> =
        run.images.iter().map(|p| (p.node.as_str(), p.role, p.resize.len())).collect();
    assert_eq!(refs, [("78", ImageRole::Reference, 1), ("79", ImageRole::Reference, 0)]);
    assert!(run.images[0].resize[0].kontext, "the first picture is scaled to a Kontext size");
    assert_eq!((run.size_from, run.width, run.height), (Some(0), None, None), "sized by the encoded picture");
}

#[test]
fn what_the_edit_models_cannot_run_is_refused_naming_the_node() {
    let mut n = qwen_edit();
    set(&mut n, "75", "strength", json!(0.5));
    refused(n, "75", "CFGNorm strength 0.5");
    // The negative on other pictures than the positive.
    let mut n = qwen_edit();
    set(&mut n, "110", "image2", Value::Null);
    refused(n, "3", "`negative` conditions on pictures of nodes [78]");
    // The latent encodes a picture that is no reference.
    let mut n = qwen_edit();
    n.push(node("80", "load.image", json!({"file": "other.png"})));
    set(&mut n, "88", "images", r("80", 0));
    refused(n, "3", "node 80's picture, which is not one of the edit's references");
    // FLUX.2's ReferenceLatent placed another way than by index.
    let mut n = qwen_edit();
    n.push(node("90", "condition.reference_method", json!({"conditioning": r("111", 0), "method": "offset"})));
    set(&mut n, "3", "positive", r("90", 0));
    refused(n, "90", "reference_latents_method `offset`");
    // A zeroed-out negative guides nowhere: only without guidance.
    let mut n = qwen_edit();
    n.push(node("82", "encode.zero", json!({"conditioning": r("110", 0)})));
    set(&mut n, "3", "negative", r("82", 0));
    refused(n, "3", "zeroed out (ConditioningZeroOut) with cfg 2.5");
}
