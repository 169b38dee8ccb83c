//! LTX-2's audio-video graphs, lowered: the two-stage graph the LTX-2 pack makes of ComfyUI's
//! LTX-2.3 template becomes one request (each loop's noise levels as given, the sound's length,
//! plain CFG on both streams, LoRAs bound to the loop whose model carries them); what that
//! request cannot express is refused naming the node.

use fastvideo_comfy::GraphNode;
use fastvideo_request::{LoraExpert, TaskType};
use serde_json::{json, Value};

use crate::common::{lower, node, r, refused, set};

/// The two-stage graph: base at 32×32 (ManualSigmas from 1), the upsampler, the refine on its
/// own levels with the distilled LoRA, video and sound decoded into one MP4.
fn two_stage() -> Vec<GraphNode> {
    let sampler = |id: &str, noise: &str, guider: &str, sigmas: &str, latent: &str| {
        node(
            id,
            "sample.custom",
            json!({"noise": r(noise, 0), "guider": r(guider, 0), "sampler": r("select", 0), "sigmas": r(sigmas, 0),
                   "latent": r(latent, 0)}),
        )
    };
    vec![
        node("ckpt", "load.checkpoint", json!({"file": "ltx-2.3.safetensors"})),
        node("te", "load.text_encoder", json!({"file": "gemma.safetensors"})),
        node("avae", "load.audio_vae", json!({"file": "ltx-2.3.safetensors"})),
        node("ups", "load.upscale_model", json!({"file": "upscaler.safetensors"})),
        node(
            "lora",
            "model.lora_model",
            json!({"model": r("ckpt", 0), "file": "distilled.safetensors", "strength": 0.5}),
        ),
        node("pos", "encode.text", json!({"text_encoder": r("te", 0), "text": "a bell rings"})),
        node("neg", "encode.text", json!({"text_encoder": r("te", 0), "text": "blurry"})),
        node(
            "cond",
            "condition.frame_rate",
            json!({"positive": r("pos", 0), "negative": r("neg", 0), "frame_rate": 8.0}),
        ),
        node(
            "g1",
            "guider.cfg",
            json!({"model": r("ckpt", 0), "positive": r("cond", 0), "negative": r("cond", 1), "cfg": 3.0}),
        ),
        node(
            "crop",
            "condition.crop_guides",
            json!({"positive": r("cond", 0), "negative": r("cond", 1), "latent": r("sep1", 0)}),
        ),
        node(
            "g2",
            "guider.cfg",
            json!({"model": r("lora", 0), "positive": r("crop", 0), "negative": r("crop", 1), "cfg": 1.0}),
        ),
        node("select", "sampler.select", json!({"sampler": "euler"})),
        node("n1", "noise.random", json!({"seed": 7})),
        node("n2", "noise.random", json!({"seed": 42})),
        node("s1", "schedule.manual", json!({"sigmas": "1.0, 0.9875, 0.725, 0.421875, 0.0"})),
        node("s2", "schedule.manual", json!({"sigmas": "0.85, 0.7250, 0.4219, 0.0"})),
        node("video", "latent.empty", json!({"width": 40, "height": 32, "frames": 18, "batch": 1})),
        node("audio", "latent.empty_audio", json!({"audio_vae": r("avae", 0), "frames": 18, "fps": 8, "batch": 1})),
        node("av1", "latent.av_concat", json!({"video": r("video", 0), "audio": r("audio", 0)})),
        sampler("base", "n1", "g1", "s1", "av1"),
        node("sep1", "latent.av_separate", json!({"latent": r("base", 0)})),
        node(
            "up",
            "latent.upsample",
            json!({"latent": r("sep1", 0), "upscale_model": r("ups", 0), "vae": r("ckpt", 2)}),
        ),
        node(
            "keep",
            "latent.image_inplace",
            json!({"vae": r("ckpt", 2), "latent": r("up", 0), "strength": 1.0, "bypass": true}),
        ),
        node("av2", "latent.av_concat", json!({"video": r("keep", 0), "audio": r("sep1", 1)})),
        sampler("refine", "n2", "g2", "s2", "av2"),
        node("sep2", "latent.av_separate", json!({"latent": r("refine", 0)})),
        node("dec", "decode.vae", json!({"latent": r("sep2", 0), "vae": r("ckpt", 2)})),
        node("snd", "decode.audio", json!({"latent": r("sep2", 1), "audio_vae": r("avae", 0)})),
        node("mk", "video.create", json!({"images": r("dec", 0), "audio": r("snd", 0), "fps": 8.0})),
        node("out", "output.video", json!({"video": r("mk", 0), "prefix": "video/LTX"})),
    ]
}

#[test]
fn the_two_stage_graph_is_one_request_with_each_loops_levels() {
    let p = lower(two_stage()).unwrap();
    assert_eq!(p.task, TaskType::T2v);
    assert_eq!((p.prompt.as_str(), p.negative.as_deref()), ("a bell rings", Some("blurry")));
    assert_eq!((p.seed, p.steps, p.cfg), (7, 4, 3.0));
    // The latent's 32-pixel cells (40 → 32), twice over for two stages; 8k+1 frames (18 → 17).
    assert_eq!((p.width, p.height, p.frames, p.fps), (Some(64), Some(64), Some(17), Some(8.0)));
    let np = serde_json::Value::Object(p.node_params.clone());
    assert_eq!(np["denoise"]["sigmas"], json!([1.0, 0.9875, 0.725, 0.421875]));
    assert_eq!(np["denoise"]["audio_seconds"], json!(18.0 / 8.0));
    assert_eq!(
        np["refine"],
        json!({"sigmas": [0.85, 0.725, 0.4219], "seed": 42, "guidance_scale": 1.0,
                                    "audio_guidance_scale": 1.0})
    );
    assert_eq!(p.knobs["audio_guidance_scale"], json!(3.0));
    assert_eq!((p.knobs["stg_scale"].as_f64(), p.knobs["modality_scale"].as_f64()), (Some(0.0), Some(1.0)));
    // The LoRA is on the refine's model only: it binds to that loop.
    assert_eq!(p.loras.len(), 1);
    assert_eq!((p.loras[0].file.as_str(), p.loras[0].expert), ("distilled.safetensors", Some(LoraExpert::Refine)));
    assert!(p.outputs[0].audio, "the MP4 carries the sound");
    let roles: Vec<&str> = p.files.iter().map(|f| f.role).collect();
    assert!(roles.contains(&"upscale_model") && roles.contains(&"audio_vae") && roles.contains(&"text_encoder"));
}

#[test]
fn what_the_request_cannot_express_is_refused_naming_the_node() {
    let mut g = two_stage();
    set(&mut g, "select", "sampler", json!("dpmpp_2m"));
    refused(g, "select", "`euler`, `euler_ancestral` or `gradient_estimation`");

    let mut g = two_stage();
    set(&mut g, "s2", "sigmas", json!("0.85, 0.725, 0.42"));
    refused(g, "s2", "ends at 0.42");

    let mut g = two_stage();
    set(&mut g, "s1", "sigmas", json!("1.0, 0.5, 0.7, 0.0"));
    refused(g, "s1", "must descend");

    let mut g = two_stage();
    set(&mut g, "keep", "bypass", json!(false));
    refused(g, "keep", "set bypass");

    let mut g = two_stage();
    set(&mut g, "audio", "fps", json!(24));
    refused(g, "audio", "differs from LTXVConditioning's 8");

    let mut g = two_stage();
    g.push(node("other", "load.checkpoint", json!({"file": "ltx-2.3-distilled.safetensors"})));
    set(&mut g, "lora", "model", r("other", 0));
    refused(g, "g2", "both stages run one model");

    let mut g = two_stage();
    g.push(node("gen", "text.generate", json!({"text_encoder": r("te", 0), "prompt": "a bell"})));
    set(&mut g, "pos", "text", r("gen", 0));
    refused(g, "pos", "switch the enhancer off");
}

#[test]
fn one_stage_without_the_sound_in_the_video() {
    let mut g = two_stage();
    // The base sampler's halves straight into the decoders; CreateVideo without the sound.
    set(&mut g, "dec", "latent", r("sep1", 0));
    set(&mut g, "snd", "latent", r("sep1", 1));
    set(&mut g, "mk", "audio", Value::Null);
    let p = lower(g).unwrap();
    assert_eq!((p.width, p.height), (Some(32), Some(32)));
    assert!(!p.node_params.contains_key("refine"));
    assert!(p.loras.is_empty(), "the LoRA was on the unused refine's model");
    assert!(!p.outputs[0].audio);
}

/// `LTXVScheduler` on the base: its levels computed when the workflow compiles, by ComfyUI's
/// arithmetic (values from its `LTXVScheduler.get_sigmas` run in Python: 4 steps, the default
/// shifts, stretched to 0.1, for the 16×16×24 latent of 768×512×121).
#[test]
fn ltxv_scheduler_levels_are_comfyuis() {
    let mut g = two_stage();
    g.push(node(
        "ltxv",
        "schedule.ltxv",
        json!({"steps": 4, "max_shift": 2.05, "base_shift": 0.95, "stretch": true, "terminal": 0.1, "latent": r("av1", 0)}),
    ));
    set(&mut g, "base", "sigmas", r("ltxv", 0));
    set(&mut g, "video", "width", json!(768));
    set(&mut g, "video", "height", json!(512));
    set(&mut g, "video", "frames", json!(121));
    let p = lower(g).unwrap();
    let got: Vec<f64> = serde_json::from_value(p.node_params["denoise"]["sigmas"].clone()).unwrap();
    let want = [1.0, 0.8838440179824829, 0.6650611162185669, 0.10000002384185791];
    assert_eq!(got.len(), 4);
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 1e-6, "{got:?}");
    }
    assert_eq!(p.steps, 4);
}
