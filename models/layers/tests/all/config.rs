//! The strict `config.json` reader: unknown keys are errors naming the key, provenance and
//! declared-inert keys are dropped.

use fastvideo_layers::config::{read_config, read_config_with, unsupported, TRANSFORMERS_BOOKKEEPING};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Tiny {
    dim: i64,
}

fn write(json: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    std::fs::write(&path, json).unwrap();
    (dir, path)
}

#[test]
fn an_unknown_key_is_an_error_naming_it() {
    let (_dir, path) = write(r#"{"dim": 4, "sliding_window": 128}"#);
    let e = read_config::<Tiny>(&path).unwrap_err().to_string();
    assert!(e.contains("unsupported config key `sliding_window`"), "{e}");
    assert!(e.contains("config.json"), "the file is named: {e}");
}

#[test]
fn provenance_is_dropped_and_inert_keys_only_where_declared() {
    let (_dir, path) = write(r#"{"dim": 4, "_class_name": "X", "transformers_version": "5.0", "return_dict": true}"#);
    let e = read_config::<Tiny>(&path).unwrap_err().to_string();
    assert!(e.contains("`return_dict`"), "bookkeeping is refused unless declared inert: {e}");
    let t: Tiny = read_config_with(&path, &[TRANSFORMERS_BOOKKEEPING]).unwrap();
    assert_eq!(t.dim, 4);
}

#[test]
fn a_file_that_is_not_an_object_is_refused() {
    let (_dir, path) = write("[1, 2]");
    let e = read_config::<Tiny>(&path).unwrap_err().to_string();
    assert!(e.contains("expected a JSON object"), "{e}");
    let e = unsupported(&path, "act", "\"relu\"", "gelu only").to_string();
    assert!(e.contains("config key `act` = \"relu\" is not supported (gelu only)"), "{e}");
}
