//! `fastvideo generate` on the tiny Wan 2.2 two-expert folders as a user runs it: the expert
//! flags reach the run (`--boundary-ratio`, `--guidance-2`), the same flags give the same video,
//! and bad values or a one-expert model give one clear line naming the field.

use std::path::Path;
use std::process::{Command, Output};

use crate::common::assert_user_error;

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name).display().to_string()
}

fn generate(model: &str, extra: &[&str], out: &Path) -> Output {
    let mut args = vec!["generate", "--model", model, "--prompt", "a red circle moving left", "--seed", "3"];
    args.extend(["--height", "32", "--width", "32", "--frames", "9", "--steps", "4", "--fps", "16", "--quiet"]);
    args.extend(["--out", out.to_str().unwrap()]);
    args.extend(extra);
    Command::new(env!("CARGO_BIN_EXE_fastvideo")).args(&args).output().expect("binary runs")
}

fn video(model: &str, extra: &[&str]) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("v.mp4");
    let r = generate(model, extra, &out);
    assert!(r.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&r.stderr));
    std::fs::read(&out).unwrap()
}

#[test]
fn the_expert_flags_reach_the_run() {
    let m = fixture("tiny-wan22-t2v");
    let base = video(&m, &["--guidance", "4", "--guidance-2", "3"]);
    assert_eq!(base, video(&m, &["--guidance", "4", "--guidance-2", "3"]), "the same flags, the same video");
    // The folder's boundary is 0.875; 0.5 keeps the high-noise expert for more steps.
    assert_ne!(base, video(&m, &["--guidance", "4", "--guidance-2", "3", "--boundary-ratio", "0.5"]));
    assert_ne!(base, video(&m, &["--guidance", "4", "--guidance-2", "1.5"]));
}

#[test]
fn bad_expert_values_and_one_expert_models_name_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("v.mp4");
    let r = generate(&fixture("tiny-wan22-t2v"), &["--boundary-ratio", "1.5"], &out);
    assert_user_error(&r, "diffusion.boundary_ratio");
    let r = generate(&fixture("tiny-wan"), &["--guidance-2", "3"], &out);
    assert_user_error(&r, "diffusion.guidance_scale_2");
    assert!(!out.exists(), "nothing is written for a refused request");
}

/// A 32x32 PNG (blue-green with a red channel of 20) at `path`.
fn write_png(path: &Path) {
    let mut rgb = vec![200u8; 32 * 32 * 3];
    rgb.iter_mut().step_by(3).for_each(|r| *r = 20);
    let file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut enc = png::Encoder::new(file, 32, 32);
    enc.set_color(png::ColorType::Rgb);
    enc.write_header().unwrap().write_image_data(&rgb).unwrap();
}

#[test]
fn the_two_expert_image_model_generates_from_a_picture() {
    let dir = tempfile::tempdir().unwrap();
    let (png, out) = (dir.path().join("first.png"), dir.path().join("v.mp4"));
    write_png(&png);
    let r = generate(&fixture("tiny-wan22-i2v"), &["--image", png.to_str().unwrap()], &out);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(std::fs::metadata(&out).unwrap().len() > 0);
}

#[test]
fn the_ti2v_model_takes_text_alone_or_text_and_a_picture() {
    // Sides are multiples of 32 on TI2V (its VAE is 16x, the transformer's patch 2x).
    let m = fixture("tiny-wan22-ti2v");
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("first.png");
    write_png(&png);
    let text = video(&m, &[]);
    let image = video(&m, &["--image", png.to_str().unwrap()]);
    assert_ne!(text, image, "the picture conditions the video");
    let args = ["generate", "--model", &m, "--prompt", "a red circle", "--height", "48", "--width", "32", "--quiet"];
    let r = Command::new(env!("CARGO_BIN_EXE_fastvideo")).args(args).output().unwrap();
    assert_user_error(&r, "diffusion.height");
}

/// An API-format ComfyUI prompt chaining two `KSamplerAdvanced` over two `UNETLoader`s the way
/// the Wan 2.2 templates do: the first model runs steps 0..`switch` with cfg 4 and keeps its
/// leftover noise, the second the rest with cfg 3 from that latent.
fn chained_prompt(switch: u32) -> serde_json::Value {
    serde_json::json!({
        "1": {"class_type": "UNETLoader", "inputs": {"unet_name": "high.safetensors", "weight_dtype": "default"}},
        "2": {"class_type": "UNETLoader", "inputs": {"unet_name": "low.safetensors", "weight_dtype": "default"}},
        "3": {"class_type": "CLIPLoader", "inputs": {"clip_name": "te.safetensors", "type": "wan", "device": "default"}},
        "4": {"class_type": "VAELoader", "inputs": {"vae_name": "vae.safetensors"}},
        "5": {"class_type": "CLIPTextEncode", "inputs": {"text": "a red circle moving left", "clip": ["3", 0]}},
        "6": {"class_type": "CLIPTextEncode", "inputs": {"text": "", "clip": ["3", 0]}},
        "7": {"class_type": "EmptyHunyuanLatentVideo", "inputs": {"width": 32, "height": 32, "length": 9, "batch_size": 1}},
        "8": {"class_type": "KSamplerAdvanced", "inputs": {
            "model": ["1", 0], "add_noise": "enable", "noise_seed": 3, "steps": 4, "cfg": 4.0,
            "sampler_name": "euler", "scheduler": "simple", "positive": ["5", 0], "negative": ["6", 0],
            "latent_image": ["7", 0], "start_at_step": 0, "end_at_step": switch, "return_with_leftover_noise": "enable"}},
        "9": {"class_type": "KSamplerAdvanced", "inputs": {
            "model": ["2", 0], "add_noise": "disable", "noise_seed": 0, "steps": 4, "cfg": 3.0,
            "sampler_name": "euler", "scheduler": "simple", "positive": ["5", 0], "negative": ["6", 0],
            "latent_image": ["8", 0], "start_at_step": switch, "end_at_step": 10000, "return_with_leftover_noise": "disable"}},
        "10": {"class_type": "VAEDecode", "inputs": {"samples": ["9", 0], "vae": ["4", 0]}},
        "11": {"class_type": "CreateVideo", "inputs": {"images": ["10", 0], "fps": 16}},
        "12": {"class_type": "SaveVideo", "inputs": {"video": ["11", 0], "filename_prefix": "video/ComfyUI", "format": "auto", "codec": "auto"}}
    })
}

#[test]
fn chained_samplers_on_two_models_run_as_one_two_expert_request() {
    let dir = tempfile::tempdir().unwrap();
    let m = fixture("tiny-wan22-t2v");
    let mut models = String::new();
    for f in ["high.safetensors", "low.safetensors", "te.safetensors", "vae.safetensors"] {
        models += &format!("\"{f}\" = \"{m}\"\n");
    }
    let deploy =
        crate::common::comfy::deploy_with(dir.path(), &[("fastvideo_translator_comfy_core", "comfy-core")], &models);
    let wf = dir.path().join("chain.json");
    std::fs::write(&wf, chained_prompt(2).to_string()).unwrap();
    let (d, w) = (deploy.to_str().unwrap(), wf.to_str().unwrap());
    let fv = |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_fastvideo")).args(args).output().unwrap();

    let out = fv(&["workflow", "compile", w, "--deploy", d]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let c: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let runs = c["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "one request for the two samplers");
    assert_eq!((runs[0]["steps"].clone(), runs[0]["switch_step"].clone()), (4.into(), 2.into()));
    assert_eq!((runs[0]["cfg"].clone(), runs[0]["cfg_2"].clone()), (4.0.into(), 3.0.into()));

    // The run is what `generate` makes with the same split.
    let out_dir = dir.path().join("output");
    let out = fv(&["workflow", "run", w, "--deploy", d, "--out-dir", out_dir.to_str().unwrap(), "--quiet"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let comfy = std::fs::read(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
    let direct = video(&m, &["--sampler", "euler", "--guidance", "4", "--guidance-2", "3", "--switch-step", "2"]);
    assert_eq!(comfy, direct);

    // A LoRA on each model (LightX2V's variant of the templates) binds to that model's expert.
    let mut with_loras = chained_prompt(2);
    for (id, model, file) in [("13", "1", "high_lora.safetensors"), ("14", "2", "low_lora.safetensors")] {
        with_loras[id] = serde_json::json!({"class_type": "LoraLoaderModelOnly",
            "inputs": {"model": [model, 0], "lora_name": file, "strength_model": 1.0}});
    }
    with_loras["8"]["inputs"]["model"] = serde_json::json!(["13", 0]);
    with_loras["9"]["inputs"]["model"] = serde_json::json!(["14", 0]);
    std::fs::write(&wf, with_loras.to_string()).unwrap();
    let out = fv(&["workflow", "compile", w, "--deploy", d]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let c: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let loras: Vec<(String, String)> = c["runs"][0]["loras"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["file"].as_str().unwrap().into(), l["expert"].as_str().unwrap_or("both").into()))
        .collect();
    let want = [("high_lora.safetensors", "high_noise"), ("low_lora.safetensors", "low_noise")];
    assert_eq!(loras, want.map(|(f, e)| (f.to_string(), e.to_string())));

    // A second sampler that does not start where the first stopped is named.
    let mut bad = chained_prompt(2);
    bad["9"]["inputs"]["start_at_step"] = 3.into();
    std::fs::write(&wf, bad.to_string()).unwrap();
    let out = fv(&["workflow", "compile", w, "--deploy", d]);
    assert_user_error(&out, "node 9");
}

#[test]
fn comfy_switch_nodes_resolve_to_the_input_they_pick() {
    // Wan 2.2's 14B templates choose models and numbers through ComfySwitchNode: a fixed
    // boolean (a widget or a primitive) picks on_true or on_false when the workflow compiles.
    let dir = tempfile::tempdir().unwrap();
    let m = fixture("tiny-wan22-t2v");
    let mut models = String::new();
    for f in ["high.safetensors", "low.safetensors", "other.safetensors", "te.safetensors", "vae.safetensors"] {
        models += &format!("\"{f}\" = \"{m}\"\n");
    }
    let deploy =
        crate::common::comfy::deploy_with(dir.path(), &[("fastvideo_translator_comfy_core", "comfy-core")], &models);
    let compile = |switch: serde_json::Value| {
        let mut p = chained_prompt(2);
        p["20"] = serde_json::json!({"class_type": "UNETLoader", "inputs": {"unet_name": "other.safetensors", "weight_dtype": "default"}});
        p["21"] = serde_json::json!({"class_type": "PrimitiveBoolean", "inputs": {"value": true}});
        p["22"] = serde_json::json!({"class_type": "ComfySwitchNode", "inputs": {"switch": switch, "on_false": ["1", 0], "on_true": ["20", 0]}});
        p["23"] = serde_json::json!({"class_type": "PrimitiveInt", "inputs": {"value": 6}});
        p["24"] = serde_json::json!({"class_type": "ComfySwitchNode", "inputs": {"switch": ["21", 0], "on_false": 4, "on_true": ["23", 0]}});
        p["8"]["inputs"]["model"] = serde_json::json!(["22", 0]);
        p["8"]["inputs"]["steps"] = serde_json::json!(["24", 0]);
        p["9"]["inputs"]["steps"] = serde_json::json!(["24", 0]);
        let wf = dir.path().join("switch.json");
        std::fs::write(&wf, p.to_string()).unwrap();
        Command::new(env!("CARGO_BIN_EXE_fastvideo"))
            .args(["workflow", "compile", wf.to_str().unwrap(), "--deploy", deploy.to_str().unwrap()])
            .output()
            .unwrap()
    };
    let out = compile(false.into());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let c: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let files: Vec<&str> =
        c["runs"][0]["files"].as_array().unwrap().iter().map(|f| f["file"].as_str().unwrap()).collect();
    assert!(files.contains(&"high.safetensors") && !files.contains(&"other.safetensors"), "{files:?}");
    assert_eq!(c["runs"][0]["steps"], 6, "the primitive's true picks the other primitive");
    let out = compile(true.into());
    let c: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let files: Vec<&str> =
        c["runs"][0]["files"].as_array().unwrap().iter().map(|f| f["file"].as_str().unwrap()).collect();
    assert!(files.contains(&"other.safetensors") && !files.contains(&"high.safetensors"), "{files:?}");
    // A switch the graph computes cannot be resolved: named.
    assert_user_error(&compile(serde_json::json!(["7", 0])), "node 22");
}

#[test]
fn comfyuis_wan22_14b_templates_compile_to_one_two_expert_run() {
    // The official templates: switches and math expressions resolved, the high- and low-noise
    // samplers chained over the two UNETLoaders, one request each.
    let dir = tempfile::tempdir().unwrap();
    let packs = [("fastvideo_translator_comfy_core", "comfy-core"), ("fastvideo_translator_comfy_wan", "comfy-wan")];
    let deploy = crate::common::comfy::deploy_with(dir.path(), &packs, "");
    for (template, task) in [("video_wan2_2_14B_t2v.json", "t2v"), ("video_wan2_2_14B_i2v.json", "i2v")] {
        let wf = crate::common::comfy::corpus().join(template);
        let out = Command::new(env!("CARGO_BIN_EXE_fastvideo"))
            .args(["workflow", "compile", wf.to_str().unwrap(), "--deploy", deploy.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(out.status.success(), "{template}: {}", String::from_utf8_lossy(&out.stderr));
        let c: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let runs = c["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 1, "{template}");
        let r = &runs[0];
        assert_eq!(r["task"], task);
        assert_eq!((r["steps"].clone(), r["switch_step"].clone()), (20.into(), 10.into()), "{template}");
        assert_eq!((r["cfg"].clone(), r["cfg_2"].clone()), (3.5.into(), 3.5.into()), "{template}");
        assert_eq!((r["width"].clone(), r["height"].clone(), r["frames"].clone()), (640.into(), 640.into(), 81.into()));
        let files: Vec<&str> = r["files"].as_array().unwrap().iter().map(|f| f["file"].as_str().unwrap()).collect();
        assert!(
            files.iter().any(|f| f.contains("high_noise")) && files.iter().any(|f| f.contains("low_noise")),
            "{files:?}"
        );
    }
}
