//! `fastvideo serve` builds its engine through `fastvideo_assembly`: `--print-engine` prints the
//! engine the assembly builds in this process from the same config file, and the same flags
//! give the same engine. The Dynamo worker's suite (host/dynamo/tests) checks the worker against
//! the same build, so one config gives one engine behind either front end.

use std::path::Path;
use std::process::Command;

use fastvideo_assembly::{build_engine, ServeConfig};

use crate::common::assert_user_error;

fn serve(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_fastvideo")).arg("serve").args(args).output().expect("fastvideo runs")
}

fn printed(out: &std::process::Output) -> serde_json::Value {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("--print-engine prints JSON")
}

#[test]
fn serve_prints_the_engine_the_assembly_builds_from_its_config() {
    // The fixture the Dynamo worker's suite reads too: a config file and the same as flags.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/serve-engine");
    let file = dir.join("serve.toml");
    let flags = std::fs::read_to_string(dir.join("flags.txt")).unwrap();
    let flags: Vec<&str> = flags.lines().collect();
    let f = file.to_str().unwrap();
    let expected =
        serde_json::to_value(&build_engine(&ServeConfig::load(&file).unwrap()).unwrap().description).unwrap();
    assert_eq!(expected["model"], "shared-name");
    assert_eq!(printed(&serve(&["--config", f, "--print-engine"])), expected);
    assert_eq!(printed(&serve(&[&flags[..], &["--print-engine"]].concat())), expected);
    // World sessions (serve's alone): the flag beside the file adds them to the same engine.
    let with_world = printed(&serve(&["--config", f, "--world", "default", "--max-sessions", "2", "--print-engine"]));
    assert!(with_world["world"].as_str().unwrap().ends_with("models/world"), "{with_world}");
    assert_eq!(with_world["scheduler"]["max_sessions"], 2);
    assert_eq!(with_world["model"], expected["model"]);
}

#[test]
fn a_bad_config_is_one_error_naming_the_file_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("serve.toml");
    std::fs::write(&file, "[scheduler]\nmax_activ = 3\n").unwrap();
    assert_user_error(&serve(&["--config", file.to_str().unwrap()]), "max_activ");
    std::fs::write(&file, "[scheduler]\nmax_stretch = 0.5\n").unwrap();
    assert_user_error(&serve(&["--config", file.to_str().unwrap(), "--print-engine"]), "--max-stretch");
    assert_user_error(&serve(&["--config", "/nonexistent/serve.toml"]), "--config");
}
