//! The LTX-2 translator pack: ComfyUI's LTX-2 (audio and video) nodes as pipeline stages. The
//! video and the audio latent travel packed in one latent (`LTXVConcatAVLatent`) through the
//! sampler and are split again (`LTXVSeparateAVLatent`) for their decoders; the latent
//! upsampler joins two samplers (the two-stage recipe). Node schemas are `object_info.json`
//! (ComfyUI's declarations).

use fastvideo_plugin_sdk::{comfy, ComfyNode, GraphNode, WorkflowTranslator};

const OBJECT_INFO: &str = include_str!("../object_info.json");

/// The stage, how many values it makes, and stage parameter ← ComfyUI input, per node type.
fn rule(class_type: &str) -> Option<comfy::StageRule> {
    Some(match class_type {
        "EmptyLTXVLatentVideo" => (
            "latent.empty",
            1,
            &[("width", "width"), ("height", "height"), ("frames", "length"), ("batch", "batch_size")][..],
        ),
        "LTXVEmptyLatentAudio" => (
            "latent.empty_audio",
            1,
            &[("frames", "frames_number"), ("fps", "frame_rate"), ("batch", "batch_size"), ("audio_vae", "audio_vae")]
                [..],
        ),
        "LTXVConcatAVLatent" => ("latent.av_concat", 1, &[("video", "video_latent"), ("audio", "audio_latent")][..]),
        "LTXVSeparateAVLatent" => ("latent.av_separate", 2, &[("latent", "av_latent")][..]),
        "LTXVAudioVAELoader" => ("load.audio_vae", 1, &[("file", "ckpt_name")][..]),
        "LTXVAudioVAEDecode" => ("decode.audio", 1, &[("latent", "samples"), ("audio_vae", "audio_vae")][..]),
        "LatentUpscaleModelLoader" => ("load.upscale_model", 1, &[("file", "model_name")][..]),
        "LTXVLatentUpsampler" => {
            ("latent.upsample", 1, &[("latent", "samples"), ("upscale_model", "upscale_model"), ("vae", "vae")][..])
        }
        "LTXVConditioning" => (
            "condition.frame_rate",
            2,
            &[("positive", "positive"), ("negative", "negative"), ("frame_rate", "frame_rate")][..],
        ),
        "LTXVCropGuides" => (
            "condition.crop_guides",
            3,
            &[("positive", "positive"), ("negative", "negative"), ("latent", "latent")][..],
        ),
        "LTXVImgToVideoInplace" => (
            "latent.image_inplace",
            1,
            &[
                ("vae", "vae"),
                ("images", "image"),
                ("latent", "latent"),
                ("strength", "strength"),
                ("bypass", "bypass"),
            ][..],
        ),
        // LTX-2's shifted schedule for a step count, by the latent's token count (computed when
        // the workflow compiles).
        "LTXVScheduler" => (
            "schedule.ltxv",
            1,
            &[
                ("steps", "steps"),
                ("max_shift", "max_shift"),
                ("base_shift", "base_shift"),
                ("stretch", "stretch"),
                ("terminal", "terminal"),
                ("latent", "latent"),
            ][..],
        ),
        "LTXVPreprocess" => ("image.preprocess", 1, &[("images", "image"), ("compression", "img_compression")][..]),
        // The model's text encoder (Gemma 3 in the folder); `text_encoder` names its file.
        "LTXAVTextEncoderLoader" => {
            ("load.text_encoder", 1, &[("file", "text_encoder"), ("checkpoint", "ckpt_name")][..])
        }
        // An LLM rewrite of the prompt: translated so a workflow that switches it off compiles;
        // the lowering refuses a prompt that reads it.
        "TextGenerateLTX2Prompt" => ("text.generate", 1, &[("text_encoder", "clip"), ("prompt", "prompt")][..]),
        _ => return None,
    })
}

struct Ltx2;

impl WorkflowTranslator for Ltx2 {
    fn handles() -> Vec<String> {
        comfy::handles(OBJECT_INFO)
    }

    fn declare() -> String {
        OBJECT_INFO.to_string()
    }

    fn translate(node: ComfyNode) -> Result<Vec<GraphNode>, String> {
        let (stage, outputs, params) =
            rule(&node.class_type).ok_or_else(|| format!("not an LTX-2 node: {}", node.class_type))?;
        let p = comfy::params(&node, params)?;
        Ok(vec![comfy::graph_node(&node, stage, outputs, p)])
    }
}

fastvideo_plugin_sdk::export_workflow_translator!(Ltx2);
fastvideo_plugin_sdk::manifest! {
    name: "comfy-ltx2",
    version: "0.1.0",
    kind: workflow_translator,
    hooks: [translate],
    distribution_altering: false,
    description: "ComfyUI LTX-2 nodes: EmptyLTXVLatentVideo, LTXVEmptyLatentAudio, LTXVConcatAVLatent/LTXVSeparateAVLatent, LTXVAudioVAELoader/Decode, LatentUpscaleModelLoader, LTXVLatentUpsampler, LTXVConditioning, LTXVCropGuides, LTXVScheduler, LTXVImgToVideoInplace (bypassed), LTXVPreprocess, LTXAVTextEncoderLoader, TextGenerateLTX2Prompt (refused when used)",
    params_schema: { "type": "object", "properties": {}, "additionalProperties": false },
}
