//! The shipped prompt rewriter (models/default/prompt_extender) as the prompt extension's nodes
//! run it: its template ids and greedy rewrites equal transformers' (tests/fixtures/
//! rewriter_samples.json, from models/training/rewriter_samples.py), the nodes run only for
//! requests that ask, and `node_params.prompt_extend` reaches the decode loop.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use fastvideo_pipeline::{PipelineRun, PipelineSpec, Values, EXTENDED_PROMPT};
use fastvideo_qwen::extend::EXTEND_NODE;
use fastvideo_qwen::{Message, PromptExtender};
use fastvideo_request::{ModelLimits, OmniRequest, TaskType};
use tch::{Device, Kind};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn extender() -> PromptExtender {
    PromptExtender::load(&root().join("models/default/prompt_extender"), Device::Cpu, Kind::Float).unwrap()
}

/// The extension's nodes alone, ending in the extended prompt.
fn run(ext: &PromptExtender, prompt: &str, extend: bool, params: Option<serde_json::Value>) -> Option<String> {
    let spec = PipelineSpec::new("extend", vec![TaskType::T2v], ext.nodes(), &[], EXTENDED_PROMPT).unwrap();
    let mut r = OmniRequest::text_to_video("x", prompt);
    r.prompt_extend = extend;
    if let Some(p) = params {
        r.node_params.insert(EXTEND_NODE.into(), p);
    }
    let req = r.resolve(&ModelLimits::example(), || 1).unwrap();
    let mut run = PipelineRun::new(Arc::new(spec), req, Device::Cpu, Values::default(), Default::default());
    let mut progress = 0;
    run.run_to_end(&mut |e| progress += matches!(e, fastvideo_request::OmniEvent::Progress { .. }) as usize).unwrap();
    let out = run.finish(&mut |_| {}).unwrap();
    // The rewrite's steps are not the pipeline's: no progress, no step times.
    assert_eq!((progress, out.metrics.step_seconds.len()), (0, 0));
    out.extended_prompt
}

#[test]
fn rewrites_equal_transformers_greedy_rewrites() {
    let ext = extender();
    let text = std::fs::read_to_string(root().join("tests/fixtures/rewriter_samples.json")).unwrap();
    let samples: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
    assert!(samples.len() >= 20);
    let mut plain = 0;
    for s in &samples {
        let prompt = s["prompt"].as_str().unwrap();
        let ids: Vec<i64> = serde_json::from_value(s["ids"].clone()).unwrap();
        assert_eq!(ext.lm.prompt_ids(&[Message::new("user", prompt)]).unwrap(), ids, "{prompt}");
        // Exact: greedy over float32 logits, and the fixture's rewrites are the reference's.
        let got = run(&ext, prompt, true, None).unwrap();
        assert_eq!(got, s["rewrite"].as_str().unwrap(), "{prompt}");
        plain += (got == s["target"].as_str().unwrap()) as usize;
    }
    // The rewriter does its job on held-out phrasings (scored in full by `fastvideo eval --extend`).
    assert!(plain * 10 >= samples.len() * 9, "{plain} of {}", samples.len());
}

#[test]
fn the_nodes_run_only_when_asked_and_take_their_parameters() {
    let ext = extender();
    assert_eq!(run(&ext, "a crimson disc gliding leftwards over snow", false, None), None);
    assert_eq!(
        run(&ext, "a crimson disc gliding leftwards over snow", true, None).as_deref(),
        Some("a red circle moving left on a white background")
    );
    // Two tokens at most: the rewrite stops early.
    let short =
        run(&ext, "a crimson disc gliding leftwards over snow", true, Some(serde_json::json!({"max_tokens": 2})));
    assert_eq!(short.as_deref(), Some("a red"));
}
