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
