//! `fastvideo workflow` on the pinned ComfyUI template corpus (fetched by
//! `host/scripts/comfy-corpus.sh`, which the test script runs).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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
