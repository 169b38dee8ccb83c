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
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("serve.toml");
    std::fs::write(
        &file,
        "[model]\ndevice = \"cpu\"\nname = \"shared-name\"\ndtype = \"fp32\"\nkernels = false\n\
         [scheduler]\npolicy = \"fifo\"\nmax_active = 3\nmax_queue = 5\nmemory_mib = 777\nmax_batch = 2\n\
         max_stretch = 0\nmax_request_seconds = 120.5\n[world]\nmodel = \"default\"\nmax_sessions = 2\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let expected =
        serde_json::to_value(&build_engine(&ServeConfig::load(Path::new(f)).unwrap()).unwrap().description).unwrap();
    assert_eq!(expected["world"], "world");
    assert_eq!(expected["scheduler"]["max_sessions"], 2);
    assert_eq!(printed(&serve(&["--config", f, "--print-engine"])), expected);
    let flags = [
        "--device",
        "cpu",
        "--model-name",
        "shared-name",
        "--dtype",
        "fp32",
        "--kernels",
        "off",
        "--policy",
        "fifo",
        "--max-active",
        "3",
        "--max-queue",
        "5",
        "--memory-mib",
        "777",
        "--max-batch",
        "2",
        "--max-stretch",
        "0",
        "--max-request-seconds",
        "120.5",
        "--world",
        "default",
        "--max-sessions",
        "2",
        "--print-engine",
    ];
    assert_eq!(printed(&serve(&flags)), expected);
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
