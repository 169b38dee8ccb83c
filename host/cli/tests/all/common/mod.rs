//! Helpers shared by the integration-test suites (and, through `#[path]`, the `world_latency` bench).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub mod browser;
pub mod comfy;
pub mod server;

/// The first-party plugins (`plugins/`) by crate file stem, built once for every suite: the suites
/// share one process, and builds running at once would rewrite the `.component.wasm` files that
/// another test is hashing.
pub fn plugins() -> &'static BTreeMap<String, PathBuf> {
    static P: OnceLock<BTreeMap<String, PathBuf>> = OnceLock::new();
    P.get_or_init(|| {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        fastvideo_plugin_host::build_plugins(&repo.join("plugins")).expect("plugins build")
    })
}

/// Asserts a user error: non-zero exit, one `error:` line containing `needle`, no panic.
/// The `fastvideo` binary run with `args` (backtraces on, so a panic shows where).
pub fn fastvideo(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_fastvideo"))
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("binary runs")
}

pub fn assert_user_error(out: &std::process::Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "expected failure, got success; stderr: {err}");
    assert!(!err.contains("panicked"), "panicked: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(lines.len(), 1, "one error line expected: {err}");
    assert!(lines[0].contains(needle), "`{needle}` not in: {}", lines[0]);
}

/// The Python with the official `openai` client (`.venv-client`, which host/scripts/test.sh sets
/// up), or `FASTVIDEO_CLIENT_PYTHON`.
pub fn client_python() -> std::path::PathBuf {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let p = std::env::var_os("FASTVIDEO_CLIENT_PYTHON")
        .map(Into::into)
        .unwrap_or_else(|| root.join(".venv-client/bin/python"));
    assert!(p.exists(), "{} not found: run host/scripts/test.sh once (it installs the openai client)", p.display());
    p
}

/// Copies the folder `from` to `to` (a model folder to edit in a test).
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        let dest = to.join(p.file_name().unwrap());
        if p.is_dir() {
            copy_dir(&p, &dest);
        } else {
            std::fs::copy(&p, &dest).unwrap();
        }
    }
}
