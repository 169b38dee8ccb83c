//! Prompt extension with the shipped rewriter (models/default/prompt_extender): `generate
//! --extend-prompt`, `eval --extend`, and `prompt_extend` on `fastvideo serve`, with the warnings
//! that name words the text encoder does not know.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::{json, Value};

use crate::common::server::Server;

const FREE_FORM: &str = "a crimson disc gliding leftwards over snow";
const PLAIN: &str = "a red circle moving left on a white background";

fn fastvideo(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fastvideo")).args(args).output().expect("binary runs")
}

fn repo(path: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").join(path).display().to_string()
}

#[test]
fn generate_extends_the_prompt_and_says_what_the_model_was_given() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.mp4"), dir.path().join("b.mp4"));
    let small = ["--frames", "5", "--steps", "2", "--seed", "3", "--quiet"];
    let mut args = vec!["generate", "--prompt", FREE_FORM, "--extend-prompt", "--json", "--out", a.to_str().unwrap()];
    args.extend(small);
    let out = fastvideo(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains(&format!("extended prompt: {PLAIN}")), "{err}");
    assert!(!err.contains("does not know"), "the extended prompt is all known words: {err}");
    let record: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(record["extended_prompt"], json!(PLAIN));
    let nodes: Vec<&str> =
        record["metrics"]["node_seconds"].as_array().unwrap().iter().map(|n| n[0].as_str().unwrap()).collect();
    assert_eq!(&nodes[..4], ["extend_tokenize", "prompt_extend", "extend_detokenize", "text_encode"]);
    // The rewrite's tokens are not denoise steps (the step metrics and the scheduler's costs).
    assert_eq!(record["metrics"]["step_seconds"].as_array().unwrap().len(), 2, "{}", record["metrics"]);
    // The same video as the plain prompt asked for directly.
    let mut args = vec!["generate", "--prompt", PLAIN, "--out", b.to_str().unwrap()];
    args.extend(small);
    assert!(fastvideo(&args).status.success());
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());

    // Without the flag, the unknown words are named and the flag suggested.
    let mut args = vec!["generate", "--prompt", FREE_FORM, "--out", b.to_str().unwrap()];
    args.extend(small);
    let err = String::from_utf8_lossy(&fastvideo(&args).stderr).to_string();
    assert!(err.contains("does not know these words: crimson, disc, gliding, leftwards, over, snow"), "{err}");
    assert!(err.contains("--extend-prompt"), "{err}");

    // A model without a rewriter refuses the flag by name before any work.
    let tiny = repo("tests/fixtures/tiny-wan");
    let args = ["generate", "--model", &tiny, "--prompt", FREE_FORM, "--extend-prompt", "--out", b.to_str().unwrap()];
    crate::common::assert_user_error(&fastvideo(&args), "--extend-prompt");
}

#[test]
fn eval_extend_scores_free_form_phrasings_with_and_without_the_rewriter() {
    let out = fastvideo(&["eval", "--extend", "--limit", "2", "--steps", "2", "--json"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((s["phrasings"].as_u64(), s["exact_rewrites"].as_u64()), (Some(2), Some(2)), "{s}");
    assert!(s["accuracy"]["as_written"]["color"].is_number() && s["accuracy"]["extended"]["color"].is_number());
    assert!(err.contains("| extended (--extend-prompt) |"), "{err}");
}

#[test]
fn serve_runs_prompt_extend_and_records_the_prompt_and_the_warnings() {
    let default = repo("models/default");
    let tiny = format!("tiny={}", repo("tests/fixtures/tiny-wan"));
    let server = Server::start(&["--model", &default, "--model", &tiny]);
    let body = |extend: Option<bool>| {
        let mut b = json!({"prompt": FREE_FORM, "num_inference_steps": 2, "num_frames": 5, "seed": 3});
        if let Some(e) = extend {
            b["prompt_extend"] = json!(e);
        }
        b
    };
    // Extended: the job records the prompt the model was given, and no warning.
    let (status, v) = server.post("/v1/videos", body(Some(true)));
    assert_eq!(status, 200, "{v}");
    assert!(v.get("warnings").is_none(), "{v}");
    let done = server.wait_done(v["id"].as_str().unwrap());
    assert_eq!((done["status"].as_str(), done["extended_prompt"].as_str()), (Some("completed"), Some(PLAIN)), "{done}");
    // As written: the warning names the words and how to extend; no extended prompt.
    let (status, v) = server.post("/v1/videos", body(None));
    assert_eq!(status, 200, "{v}");
    let warning = v["warnings"][0].as_str().unwrap_or_default();
    assert!(warning.contains("crimson, disc, gliding") && warning.contains("\"prompt_extend\": true"), "{v}");
    let done = server.wait_done(v["id"].as_str().unwrap());
    assert!(done.get("extended_prompt").is_none() && done["warnings"] == v["warnings"], "{done}");
    // A prompt the rewriter cannot take whole (its context is 128 positions): a 400 naming it.
    let mut b = body(Some(true));
    b["prompt"] = json!(["red"; 200].join(" "));
    let (status, v) = server.post("/v1/videos", b);
    assert_eq!((status, v["error"]["param"].as_str()), (400, Some("prompt")), "{v}");
    // A model without a rewriter: a 400 naming the field.
    let mut b = body(Some(true));
    (b["model"], b["width"], b["height"]) = (json!("tiny"), json!(32), json!(32));
    let (status, v) = server.post("/v1/videos", b);
    assert_eq!((status, v["error"]["param"].as_str()), (400, Some("prompt_extend")), "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("no prompt extender"), "{v}");
}
