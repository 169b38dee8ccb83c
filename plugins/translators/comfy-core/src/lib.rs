//! The core translator pack: each ComfyUI core node this runtime runs, as pipeline stages.
//! Node schemas are `object_info.json` (ComfyUI's own declarations, with the choices this
//! runtime accepts), which `declare` returns and `handles` reads its types from.

use fastvideo_plugin_sdk::{ComfyNode, GraphNode, WorkflowTranslator};
use serde_json::{json, Map, Value};

const OBJECT_INFO: &str = include_str!("../object_info.json");

/// How one node type maps: the stage, how many values it makes, and stage parameter ←
/// ComfyUI input (renamed where the stage's vocabulary differs).
struct Rule {
    class_type: &'static str,
    stage: &'static str,
    outputs: usize,
    params: &'static [(&'static str, &'static str)],
}

const RULES: &[Rule] = &[
    Rule {
        class_type: "UNETLoader",
        stage: "load.diffusion_model",
        outputs: 1,
        params: &[("file", "unet_name"), ("dtype", "weight_dtype")],
    },
    Rule {
        class_type: "CLIPLoader",
        stage: "load.text_encoder",
        outputs: 1,
        params: &[("file", "clip_name"), ("type", "type"), ("device", "device")],
    },
    Rule { class_type: "VAELoader", stage: "load.vae", outputs: 1, params: &[("file", "vae_name")] },
    Rule {
        class_type: "CheckpointLoaderSimple",
        stage: "load.checkpoint",
        outputs: 3,
        params: &[("file", "ckpt_name")],
    },
    Rule { class_type: "CLIPVisionLoader", stage: "load.clip_vision", outputs: 1, params: &[("file", "clip_name")] },
    Rule {
        class_type: "CLIPVisionEncode",
        stage: "encode.clip_vision",
        outputs: 1,
        params: &[("clip_vision", "clip_vision"), ("images", "image"), ("crop", "crop")],
    },
    Rule {
        class_type: "CLIPTextEncode",
        stage: "encode.text",
        outputs: 1,
        params: &[("text", "text"), ("text_encoder", "clip")],
    },
    Rule {
        class_type: "KSampler",
        stage: "sample",
        outputs: 1,
        params: &[
            ("model", "model"),
            ("positive", "positive"),
            ("negative", "negative"),
            ("latent", "latent_image"),
            ("seed", "seed"),
            ("steps", "steps"),
            ("cfg", "cfg"),
            ("sampler", "sampler_name"),
            ("scheduler", "scheduler"),
            ("denoise", "denoise"),
        ],
    },
    Rule {
        class_type: "KSamplerAdvanced",
        stage: "sample",
        outputs: 1,
        params: &[
            ("model", "model"),
            ("positive", "positive"),
            ("negative", "negative"),
            ("latent", "latent_image"),
            ("seed", "noise_seed"),
            ("steps", "steps"),
            ("cfg", "cfg"),
            ("sampler", "sampler_name"),
            ("scheduler", "scheduler"),
            ("add_noise", "add_noise"),
            ("start_step", "start_at_step"),
            ("end_step", "end_at_step"),
            ("return_noisy", "return_with_leftover_noise"),
        ],
    },
    Rule {
        class_type: "SamplerCustomAdvanced",
        stage: "sample.custom",
        outputs: 2,
        params: &[
            ("noise", "noise"),
            ("guider", "guider"),
            ("sampler", "sampler"),
            ("sigmas", "sigmas"),
            ("latent", "latent_image"),
        ],
    },
    Rule {
        class_type: "CFGGuider",
        stage: "guider.cfg",
        outputs: 1,
        params: &[("model", "model"), ("positive", "positive"), ("negative", "negative"), ("cfg", "cfg")],
    },
    Rule {
        class_type: "BasicScheduler",
        stage: "schedule",
        outputs: 1,
        params: &[("model", "model"), ("scheduler", "scheduler"), ("steps", "steps"), ("denoise", "denoise")],
    },
    Rule { class_type: "KSamplerSelect", stage: "sampler.select", outputs: 1, params: &[("sampler", "sampler_name")] },
    Rule { class_type: "RandomNoise", stage: "noise.random", outputs: 1, params: &[("seed", "noise_seed")] },
    Rule {
        class_type: "EmptyHunyuanLatentVideo",
        stage: "latent.empty",
        outputs: 1,
        params: &[("width", "width"), ("height", "height"), ("frames", "length"), ("batch", "batch_size")],
    },
    Rule {
        class_type: "EmptyLatentImage",
        stage: "latent.empty",
        outputs: 1,
        params: &[("width", "width"), ("height", "height"), ("batch", "batch_size")],
    },
    Rule {
        class_type: "EmptySD3LatentImage",
        stage: "latent.empty",
        outputs: 1,
        params: &[("width", "width"), ("height", "height"), ("batch", "batch_size")],
    },
    Rule {
        class_type: "ModelSamplingSD3",
        stage: "model.shift",
        outputs: 1,
        params: &[("model", "model"), ("shift", "shift")],
    },
    // The same static shift, as ComfyUI's Qwen-Image templates set it.
    Rule {
        class_type: "ModelSamplingAuraFlow",
        stage: "model.shift",
        outputs: 1,
        params: &[("model", "model"), ("shift", "shift")],
    },
    Rule {
        class_type: "ConditioningZeroOut",
        stage: "encode.zero",
        outputs: 1,
        params: &[("conditioning", "conditioning")],
    },
    // LoRA on the model; the CLIP output passes the text encoder through (LoRAs with
    // text-encoder keys are refused where adapters load, so strength_clip has nothing to scale).
    Rule {
        class_type: "LoraLoaderModelOnly",
        stage: "model.lora_model",
        outputs: 1,
        params: &[("model", "model"), ("file", "lora_name"), ("strength", "strength_model")],
    },
    Rule {
        class_type: "LoraLoader",
        stage: "model.lora",
        outputs: 2,
        params: &[("model", "model"), ("text_encoder", "clip"), ("file", "lora_name"), ("strength", "strength_model")],
    },
    Rule { class_type: "VAEDecode", stage: "decode.vae", outputs: 1, params: &[("latent", "samples"), ("vae", "vae")] },
    Rule { class_type: "VAEEncode", stage: "encode.vae", outputs: 1, params: &[("images", "pixels"), ("vae", "vae")] },
    // Pictures and videos: files in the input folder, read when the request is made.
    Rule { class_type: "LoadImage", stage: "load.image", outputs: 2, params: &[("file", "image")] },
    Rule { class_type: "LoadVideo", stage: "load.video", outputs: 1, params: &[("file", "file")] },
    Rule { class_type: "GetVideoComponents", stage: "video.components", outputs: 3, params: &[("video", "video")] },
    Rule {
        class_type: "ImageScale",
        stage: "image.resize",
        outputs: 1,
        params: &[
            ("images", "image"),
            ("method", "upscale_method"),
            ("width", "width"),
            ("height", "height"),
            ("fit", "crop"),
        ],
    },
    Rule {
        class_type: "ImageScaleToTotalPixels",
        stage: "image.resize",
        outputs: 1,
        params: &[
            ("images", "image"),
            ("method", "upscale_method"),
            ("megapixels", "megapixels"),
            ("divisible_by", "resolution_steps"),
        ],
    },
    // The FLUX Kontext size of the picture's aspect, Lanczos, center crop (Qwen-Image-Edit's
    // templates scale their pictures with it too).
    Rule { class_type: "FluxKontextImageScale", stage: "image.resize", outputs: 1, params: &[("images", "image")] },
    // The size of a picture, known when its file is read: an edit's output size.
    Rule { class_type: "GetImageSize", stage: "image.size", outputs: 3, params: &[("images", "image")] },
    Rule {
        class_type: "ImageScaleBy",
        stage: "image.resize",
        outputs: 1,
        params: &[("images", "image"), ("method", "upscale_method"), ("scale", "scale_by")],
    },
    Rule {
        class_type: "CreateVideo",
        stage: "video.create",
        outputs: 1,
        params: &[("images", "images"), ("fps", "fps"), ("audio", "audio")],
    },
    Rule {
        class_type: "SaveVideo",
        stage: "output.video",
        outputs: 0,
        params: &[("video", "video"), ("prefix", "filename_prefix"), ("format", "format"), ("codec", "codec")],
    },
    Rule {
        class_type: "SaveImage",
        stage: "output.image",
        outputs: 0,
        params: &[("images", "images"), ("prefix", "filename_prefix")],
    },
    Rule {
        class_type: "SaveAnimatedWEBP",
        stage: "output.image",
        outputs: 0,
        params: &[
            ("images", "images"),
            ("prefix", "filename_prefix"),
            ("fps", "fps"),
            ("lossless", "lossless"),
            ("quality", "quality"),
        ],
    },
    // Custom sampling's noise levels as written (`"1.0, 0.99, …, 0.0"`).
    Rule { class_type: "ManualSigmas", stage: "schedule.manual", outputs: 1, params: &[("sigmas", "sigmas")] },
    // The tile sizes change where tiles meet, not what a decode is: decoded whole here.
    Rule {
        class_type: "VAEDecodeTiled",
        stage: "decode.vae",
        outputs: 1,
        params: &[("latent", "samples"), ("vae", "vae")],
    },
    Rule {
        class_type: "EmptyImage",
        stage: "image.empty",
        outputs: 1,
        params: &[("width", "width"), ("height", "height"), ("batch", "batch_size"), ("color", "color")],
    },
    // Its `resize_type` picks the rule; see `resize_rule`.
    Rule {
        class_type: "ResizeImageMaskNode",
        stage: "image.resize",
        outputs: 1,
        params: &[
            ("images", "input"),
            ("mode", "resize_type"),
            ("method", "scale_method"),
            ("width", "resize_type.width"),
            ("height", "resize_type.height"),
            ("fit", "resize_type.crop"),
            ("scale", "resize_type.multiplier"),
            ("megapixels", "resize_type.megapixels"),
        ],
    },
    // Shows a value in the UI: nothing runs.
    Rule { class_type: "PreviewAny", stage: "output.preview", outputs: 0, params: &[("source", "source")] },
    Rule { class_type: "PrimitiveInt", stage: "value", outputs: 1, params: &[("value", "value")] },
    Rule { class_type: "PrimitiveFloat", stage: "value", outputs: 1, params: &[("value", "value")] },
    Rule { class_type: "PrimitiveString", stage: "value", outputs: 1, params: &[("value", "value")] },
    Rule { class_type: "PrimitiveStringMultiline", stage: "value", outputs: 1, params: &[("value", "value")] },
    Rule { class_type: "PrimitiveBoolean", stage: "value", outputs: 1, params: &[("value", "value")] },
    // Computed by the compiler from literal inputs: the float and the int result.
    Rule {
        class_type: "ComfyMathExpression",
        stage: "math",
        outputs: 2,
        params: &[
            ("expression", "expression"),
            ("a", "values.a"),
            ("b", "values.b"),
            ("c", "values.c"),
            ("d", "values.d"),
            ("e", "values.e"),
            ("f", "values.f"),
        ],
    },
    // Resolved by the compiler: its output is `on_true` or `on_false`, as the fixed `switch` says.
    Rule {
        class_type: "ComfySwitchNode",
        stage: "switch",
        outputs: 1,
        params: &[("switch", "switch"), ("on_false", "on_false"), ("on_true", "on_true")],
    },
];

/// `{"$ref": NAME}`'s NAME.
fn ref_name(v: &Value) -> Option<&str> {
    v.as_object().filter(|o| o.len() == 1)?.get("$ref")?.as_str()
}

/// ComfyUI's combo values in the stages' vocabulary (a reference stays one): "enable" /
/// "disable" as booleans, `ImageScale`'s `crop` as the resize's fit.
fn convert(param: &str, v: Value) -> Value {
    match (param, v.as_str()) {
        ("add_noise" | "return_noisy", Some("enable")) => Value::Bool(true),
        ("add_noise" | "return_noisy", Some("disable")) => Value::Bool(false),
        ("fit", Some("disabled")) => json!("stretch"),
        ("fit", Some("center")) => json!("crop"),
        _ => v,
    }
}

/// `ResizeImageMaskNode`'s `resize_type` as the resize stage's rule: a size (`scale dimensions`),
/// a factor (`scale by multiplier`) or a pixel count (`scale total pixels`) are what the stage
/// does; the other choices keep their name in `mode`, which the lowering refuses by name.
fn resize_rule(params: &mut Map<String, Value>) {
    let mode = params.get("mode").and_then(Value::as_str).unwrap_or_default().to_string();
    let keep: &[&str] = match mode.as_str() {
        "scale dimensions" => &["width", "height", "fit"],
        "scale by multiplier" => &["scale"],
        "scale total pixels" => &["megapixels"],
        _ => &[],
    };
    if !keep.is_empty() {
        params.remove("mode");
    }
    params.retain(|k, _| keep.contains(&k.as_str()) || ["images", "method", "mode"].contains(&k.as_str()));
}

struct Core;

impl WorkflowTranslator for Core {
    fn handles() -> Vec<String> {
        RULES.iter().map(|r| r.class_type.to_string()).collect()
    }

    fn declare() -> String {
        OBJECT_INFO.to_string()
    }

    fn translate(node: ComfyNode) -> Result<Vec<GraphNode>, String> {
        let rule = RULES
            .iter()
            .find(|r| r.class_type == node.class_type)
            .ok_or_else(|| format!("not a core node: {}", node.class_type))?;
        let mut params = Map::new();
        let mut inputs = Vec::new();
        for (param, input) in rule.params {
            let Some(i) = node.inputs.iter().find(|i| i.name == *input) else { continue };
            let v: Value = serde_json::from_str(&i.value_json).map_err(|e| format!("input `{input}`: {e}"))?;
            let v = convert(param, v);
            if let Some(r) = ref_name(&v) {
                inputs.push(r.to_string());
            }
            params.insert(param.to_string(), v);
        }
        if rule.class_type == "FluxKontextImageScale" {
            params.extend([("kontext".into(), json!(true)), ("method".into(), json!("lanczos"))]);
            params.insert("fit".into(), json!("crop"));
        } else if rule.class_type == "SaveImage" {
            params.insert("format".into(), json!("png"));
        } else if rule.class_type == "SaveAnimatedWEBP" {
            params.insert("format".into(), json!("webp"));
        } else if rule.class_type == "ResizeImageMaskNode" {
            resize_rule(&mut params);
        }
        Ok(vec![GraphNode {
            name: node.id.clone(),
            stage: rule.stage.to_string(),
            inputs,
            outputs: (0..rule.outputs).map(|k| format!("{}.{k}", node.id)).collect(),
            params_json: Value::Object(params).to_string(),
        }])
    }
}

fastvideo_plugin_sdk::export_workflow_translator!(Core);
fastvideo_plugin_sdk::manifest! {
    name: "comfy-core",
    version: "0.1.0",
    kind: workflow_translator,
    hooks: [translate],
    distribution_altering: false,
    description: "ComfyUI core nodes: loaders, CLIPTextEncode, CLIP vision, KSampler(Advanced), SamplerCustomAdvanced and its parts, empty latents, ModelSamplingSD3/AuraFlow, ConditioningZeroOut, LoraLoaderModelOnly/LoraLoader, VAE, LoadImage, LoadVideo/GetVideoComponents, ImageScale(By), ImageScaleToTotalPixels, FluxKontextImageScale, ResizeImageMaskNode, GetImageSize, EmptyImage, ManualSigmas, VAEDecodeTiled, CreateVideo, SaveVideo/SaveImage, PreviewAny, primitives",
    params_schema: { "type": "object", "properties": {}, "additionalProperties": false },
}
