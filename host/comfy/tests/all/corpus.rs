//! The public ComfyUI template corpus (PyPI `comfyui-workflow-templates-json`, pinned and
//! fetched by `host/scripts/comfy-corpus.sh`, which the test script runs): every workflow
//! parses, and the coverage headline matches the committed expectation.

use std::path::PathBuf;

use crate::common;

use fastvideo_comfy::Coverage;

fn corpus() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = root.join(".comfy-corpus/0.1.123/templates");
    assert!(dir.is_dir(), "no template corpus at {}: run `bash host/scripts/comfy-corpus.sh`", dir.display());
    dir
}

#[test]
fn every_template_parses_and_the_coverage_is_as_committed() {
    let schemas = common::core_schemas();
    let c = Coverage::of_dir(&corpus(), &schemas, &|t| schemas.get(t).is_some()).unwrap();
    let failed: Vec<_> =
        c.workflows.iter().filter_map(|w| w.error.as_ref().map(|e| format!("{}: {e}", w.file))).collect();
    assert!(failed.is_empty(), "{} workflows do not parse:\n{}", failed.len(), failed.join("\n"));
    let expected: serde_json::Value =
        serde_json::from_str(include_str!("../../../../tests/fixtures/comfy/corpus-coverage.json")).unwrap();
    let got = serde_json::json!({
        "workflows": c.workflows.len(),
        "parsed": c.parsed(),
        "skipped": c.skipped.len(),
        "covered_by_core_schemas": c.covered(),
        "node_types": c.node_types.len(),
        "nodes": c.workflows.iter().map(|w| w.nodes).sum::<usize>(),
    });
    assert_eq!(got, expected, "coverage changed; if on purpose, update tests/fixtures/comfy/corpus-coverage.json");
}
