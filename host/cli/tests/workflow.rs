//! `fastvideo workflow` on the pinned ComfyUI template corpus (fetched by
//! `host/scripts/comfy-corpus.sh`, which the test script runs): parse, coverage, and ComfyUI's
//! Wan 2.1 text-to-video template compiled by the core translator pack and run on the
//! embedded default model.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

fn fastvideo(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fastvideo")).args(args).env("RUST_BACKTRACE", "1").output().expect("binary runs")
}

fn corpus() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.comfy-corpus/0.1.123/templates");
    assert!(dir.is_dir(), "no template corpus at {}: run `bash host/scripts/comfy-corpus.sh`", dir.display());
    dir
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

/// A deploy enabling the core translator pack, with the Wan template's model files served by
/// the embedded default model.
fn comfy_deploy(dir: &Path) -> PathBuf {
    static CORE: OnceLock<PathBuf> = OnceLock::new();
    let core = CORE.get_or_init(|| {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        fastvideo_plugin_host::build_plugins(&repo.join("plugins")).expect("plugins build")
            ["fastvideo_translator_comfy_core"]
            .clone()
    });
    let hash = blake3::hash(&std::fs::read(core).unwrap()).to_hex().to_string();
    let mut toml = format!(
        "[[plugins]]\nname = \"comfy-core\"\nsource = \"{}\"\nblake3 = \"{hash}\"\n\n[workflows.models]\n",
        core.display()
    );
    for f in ["wan2.1_t2v_1.3B_fp16.safetensors", "umt5_xxl_fp8_e4m3fn_scaled.safetensors", "wan_2.1_vae.safetensors"] {
        toml += &format!("\"{f}\" = \"default\"\n");
    }
    let p = dir.join("comfyui.toml");
    std::fs::write(&p, toml).unwrap();
    p
}

/// The Wan template at a size the default model serves (64×64, 17 frames), 6 steps.
fn small_wan(dir: &Path) -> PathBuf {
    let mut w: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(corpus().join("text_to_video_wan.json")).unwrap()).unwrap();
    for n in w["nodes"].as_array_mut().unwrap() {
        match n["type"].as_str().unwrap() {
            "EmptyHunyuanLatentVideo" => n["widgets_values"] = serde_json::json!([64, 64, 17, 1]),
            "KSampler" => n["widgets_values"][2] = serde_json::json!(6),
            _ => {}
        }
    }
    let p = dir.join("wan_small.json");
    std::fs::write(&p, w.to_string()).unwrap();
    p
}

#[test]
fn the_wan_template_compiles_and_runs_on_the_default_model() {
    let dir = tempfile::tempdir().unwrap();
    let deploy = comfy_deploy(dir.path());
    let wf = small_wan(dir.path());
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
    let mp4 = mp4::Mp4Reader::read_header(std::io::Cursor::new(&bytes), bytes.len() as u64).unwrap();
    let track = mp4.tracks().values().next().unwrap();
    assert_eq!((track.width(), track.height(), track.sample_count()), (64, 64, 17));
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
