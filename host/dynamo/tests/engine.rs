//! The worker builds its engine through `fastvideo_assembly`, the code `fastvideo serve` uses:
//! from one config file (or the same flags) it prints the engine the assembly builds in this
//! process. The CLI's suite checks `fastvideo serve --print-engine` against the same build, so
//! both front ends give one engine for one config.

use std::path::{Path, PathBuf};
use std::process::Command;

use fastvideo_assembly::{build_engine, ServeConfig};

/// The shared fixture: a config file and the same settings as flags.
fn fixture() -> (PathBuf, Vec<String>) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/serve-engine");
    let flags = std::fs::read_to_string(dir.join("flags.txt")).unwrap().lines().map(String::from).collect();
    (dir.join("serve.toml"), flags)
}

fn worker(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_fastvideo-dynamo")).args(args).output().expect("the worker runs")
}

fn printed(out: &std::process::Output) -> serde_json::Value {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("--print-engine prints JSON")
}

#[test]
fn one_config_gives_the_worker_the_engine_the_assembly_builds() {
    let (file, flags) = fixture();
    let f = file.to_str().unwrap();
    let built = build_engine(&ServeConfig::load(Path::new(f)).unwrap()).unwrap();
    let expected = serde_json::to_value(&built.description).unwrap();
    // What the config asked for, after the device's defaults (no CUDA here).
    assert_eq!(expected["model"], "shared-name");
    assert_eq!(expected["scheduler"]["memory_bytes"], 777u64 << 20);
    assert_eq!(expected["scheduler"]["max_batch"], 2);
    assert_eq!(expected["scheduler"]["policy"], "fifo");
    assert!(expected["scheduler"]["max_stretch"].is_null());

    assert_eq!(printed(&worker(&["--config", f, "--print-engine"])), expected);
    // The same settings as flags build the same engine.
    let mut flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    flags.push("--print-engine");
    assert_eq!(printed(&worker(&flags)), expected);
    // A flag beside the file overrides its key alone.
    let mut over = expected.clone();
    over["scheduler"]["max_active"] = 9.into();
    assert_eq!(printed(&worker(&["--config", f, "--max-active", "9", "--print-engine"])), over);
}

#[test]
fn the_worker_names_what_it_cannot_take() {
    let out = worker(&["--device", "cpu", "--world", "default", "--print-engine"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--world") && err.contains("fastvideo serve"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let out = worker(&["--device", "cpu", "--max-stretch", "0.5", "--print-engine"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--max-stretch"), "{err}");
}
