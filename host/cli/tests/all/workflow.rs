//! `fastvideo workflow` on the pinned ComfyUI template corpus (fetched by
//! `host/scripts/comfy-corpus.sh`, which the test script runs): parse, coverage, and ComfyUI's
//! Wan 2.1 text-to-video template compiled by the core translator pack and run on the
//! embedded default model.

use crate::common;

use std::process::{Command, Output};

use crate::common::comfy::corpus;

fn fastvideo(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fastvideo")).args(args).env("RUST_BACKTRACE", "1").output().expect("binary runs")
}

#[test]
fn parse_prints_the_wan_template_in_the_api_format() {
    let out = fastvideo(&["workflow", "parse", corpus().join("text_to_video_wan.json").to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let api: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let k = &api["3"];
    assert_eq!(k["class_type"], "KSampler");
    assert_eq!(k["inputs"]["sampler_name"], "uni_pc");
    assert_eq!(k["inputs"]["steps"], 30);
    assert_eq!(k["inputs"]["model"], serde_json::json!(["48", 0]), "through ModelSamplingSD3");
    assert_eq!(api["40"]["inputs"]["length"], 33);
    assert_eq!(api["48"]["inputs"]["shift"], 8.0);
}

#[test]
fn coverage_reports_every_template_and_bad_files_get_one_error_line() {
    let out = fastvideo(&["workflow", "coverage", corpus().to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let c: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let workflows = c["workflows"].as_array().unwrap();
    assert_eq!(workflows.len(), 644);
    assert!(workflows.iter().all(|w| w["error"].is_null()));
    let wan = workflows.iter().find(|w| w["file"] == "text_to_video_wan.json").unwrap();
    assert_eq!(wan["missing"], serde_json::json!([]), "the core pack declares every node of Wan 2.1 t2v");
    assert_eq!(c["node_types"]["KSampler"]["handled"], true);

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        r#"{"nodes": [{"id": 4, "type": "KSampler", "inputs": [{"name": "model", "link": 9}]}], "links": []}"#,
    )
    .unwrap();
    let out = fastvideo(&["workflow", "parse", bad.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && !err.contains("panicked"), "{err}");
    assert!(err.contains("node 4: inputs.model: link 9 is not in the link table"), "{err}");
}

#[test]
fn the_wan_template_compiles_and_runs_on_the_default_model() {
    let dir = tempfile::tempdir().unwrap();
    let deploy = common::comfy::deploy(dir.path());
    let wf = common::comfy::small_wan_file(dir.path(), 6);
    let (d, w) = (deploy.to_str().unwrap(), wf.to_str().unwrap());

    let out = fastvideo(&["workflow", "compile", w, "--deploy", d]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let c: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(c["runs"][0]["steps"], 6);
    assert_eq!(c["runs"][0]["sampler"], "unipc");
    assert!(c["graph"].as_array().unwrap().iter().any(|n| n["stage"] == "sample" && n["origin"] == "3"));

    let out_dir = dir.path().join("output");
    let run = |args: &[&str]| {
        fastvideo(
            &[&["workflow", "run", w, "--deploy", d, "--out-dir", out_dir.to_str().unwrap(), "--quiet"], args].concat(),
        )
    };
    let out = run(&[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let written = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(written, out_dir.join("video/ComfyUI_00001_.mp4").display().to_string(), "named as ComfyUI names it");
    let bytes = std::fs::read(&written).unwrap();
    assert_eq!(common::comfy::mp4_shape(&bytes), (64, 64, 17));
    // The same workflow again: same seed, same video, the next counter.
    let again = String::from_utf8_lossy(&run(&[]).stdout).trim().to_string();
    assert!(again.ends_with("ComfyUI_00002_.mp4"), "{again}");
    assert_eq!(std::fs::read(&again).unwrap(), bytes, "the workflow's seed makes it reproducible");

    // At the template's own size the model's limit is named, at the node that set it.
    let full = corpus().join("text_to_video_wan.json");
    let out =
        fastvideo(&["workflow", "run", full.to_str().unwrap(), "--deploy", d, "--out-dir", out_dir.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && !err.contains("panicked"), "{err}");
    assert!(err.contains("error: node 40: diffusion.width: 832"), "{err}");

    let out = fastvideo(&["workflow", "coverage", corpus().to_str().unwrap(), "--deploy", d, "--json"]);
    let c: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let wan =
        c["workflows"].as_array().unwrap().iter().find(|w| w["file"] == "text_to_video_wan.json").unwrap().clone();
    assert_eq!((wan["compiles"].clone(), wan["runs_here"].clone()), (serde_json::json!(true), serde_json::json!(true)));
}

/// `workflow run` reads `LoadImage` / `LoadVideo` files from `--input-dir`: the Wan 2.1
/// image-to-video template on the image-to-video model, and a video-to-video prompt (LoadVideo
/// → GetVideoComponents → VAEEncode → KSampler at denoise 0.5) on the text-to-video fixture.
#[test]
fn image_and_video_workflows_read_the_input_folder() {
    let dir = tempfile::tempdir().unwrap();
    let model = common::comfy::i2v_model();
    let t2v =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny-wan").canonicalize().unwrap();
    let mut models = common::comfy::i2v_models(&model.dir);
    models = models.replace(
        "\"wan2.1_t2v_1.3B_fp16.safetensors\" = \"default\"",
        &format!("\"wan2.1_t2v_1.3B_fp16.safetensors\" = \"{}\"", t2v.display()),
    );
    models = models.replace("[\"default\", ", &format!("[\"{}\", ", t2v.display()));
    let packs = [("fastvideo_translator_comfy_core", "comfy-core"), ("fastvideo_translator_comfy_wan", "comfy-wan")];
    let deploy = common::comfy::deploy_with(dir.path(), &packs, &models);
    let (inputs, out_dir) = (dir.path().join("input"), dir.path().join("output"));
    std::fs::create_dir_all(&inputs).unwrap();
    let scene = fastvideo_procedural::Scene::all()[0];
    std::fs::write(inputs.join("start.png"), common::comfy::scene_png(&scene, 48)).unwrap();
    let run = |wf: &std::path::Path| {
        let (d, i, o) = (deploy.to_str().unwrap(), inputs.to_str().unwrap(), out_dir.to_str().unwrap());
        fastvideo(&[
            "workflow",
            "run",
            wf.to_str().unwrap(),
            "--deploy",
            d,
            "--input-dir",
            i,
            "--out-dir",
            o,
            "--quiet",
        ])
    };

    let i2v = dir.path().join("i2v.json");
    std::fs::write(&i2v, common::comfy::small_i2v(&model, "start.png", &scene.prompt()).to_string()).unwrap();
    let out = run(&i2v);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let written = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let i2v_video = std::fs::read(&written).unwrap();
    let (w, h, frames) = model.size;
    assert_eq!(common::comfy::mp4_shape(&i2v_video), (w as u16, h as u16, frames));

    // That video, as the next workflow's input: video to video on the text-to-video model.
    std::fs::copy(&written, inputs.join("clip.mp4")).unwrap();
    let v2v = serde_json::json!({
        "37": {"class_type": "UNETLoader", "inputs": {"unet_name": "wan2.1_t2v_1.3B_fp16.safetensors", "weight_dtype": "default"}},
        "38": {"class_type": "CLIPLoader", "inputs": {"clip_name": "umt5_xxl_fp8_e4m3fn_scaled.safetensors", "type": "wan"}},
        "39": {"class_type": "VAELoader", "inputs": {"vae_name": "wan_2.1_vae.safetensors"}},
        "6": {"class_type": "CLIPTextEncode", "inputs": {"clip": ["38", 0], "text": "a red circle moving left"}},
        "70": {"class_type": "LoadVideo", "inputs": {"file": "clip.mp4"}},
        "71": {"class_type": "GetVideoComponents", "inputs": {"video": ["70", 0]}},
        "73": {"class_type": "VAEEncode", "inputs": {"pixels": ["71", 0], "vae": ["39", 0]}},
        "3": {"class_type": "KSampler", "inputs": {"model": ["37", 0], "positive": ["6", 0], "latent_image": ["73", 0],
            "seed": 7, "steps": 2, "cfg": 1.0, "sampler_name": "euler", "scheduler": "simple", "denoise": 0.5}},
        "8": {"class_type": "VAEDecode", "inputs": {"samples": ["3", 0], "vae": ["39", 0]}},
        "55": {"class_type": "CreateVideo", "inputs": {"images": ["8", 0], "fps": ["71", 2]}},
        "56": {"class_type": "SaveVideo", "inputs": {"video": ["55", 0], "filename_prefix": "video/v2v", "format": "auto", "codec": "auto"}},
    });
    let v2v_file = dir.path().join("v2v.json");
    std::fs::write(&v2v_file, v2v.to_string()).unwrap();
    let out = run(&v2v_file);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let written = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(written.ends_with("v2v_00001_.mp4"), "{written}");
    let v2v_video = std::fs::read(&written).unwrap();
    assert_eq!(common::comfy::mp4_shape(&v2v_video), (w as u16, h as u16, frames), "the input video's size and frames");
    assert_ne!(v2v_video, i2v_video, "half the schedule ran on it");

    // A file the input folder lacks: one error line naming the loader, its input and the folder.
    std::fs::remove_file(inputs.join("start.png")).unwrap();
    common::assert_user_error(&run(&i2v), "node 52: image: Invalid image file: start.png");
}
