//! Builds a plugin workspace (like `plugins/`) with cargo for `wasm32-unknown-unknown` and
//! componentizes every resulting module. Used by the tests and `fastvideo plugin build`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{componentize, PluginError};

/// Returns component paths by crate file stem (e.g. `fastvideo_guider_cfg`), written next to
/// cargo's output as `<stem>.component.wasm`.
pub fn build_plugins(workspace: &Path) -> Result<BTreeMap<String, PathBuf>, PluginError> {
    let io = |m: String| PluginError::Io(m);
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let manifest = workspace.join("Cargo.toml");
    let target_dir = workspace.join("target");
    let status = Command::new(cargo)
        .args(["build", "--release", "--target", "wasm32-unknown-unknown", "--manifest-path"])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target_dir)
        // Flags meant for the host build (coverage, sanitizers) must not leak into wasm.
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .status()
        .map_err(|e| io(format!("running cargo for {}: {e}", manifest.display())))?;
    if !status.success() {
        return Err(io(format!(
            "building {} failed (is the target installed? `rustup target add wasm32-unknown-unknown`)",
            manifest.display()
        )));
    }
    let dir = target_dir.join("wasm32-unknown-unknown/release");
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(&dir).map_err(|e| io(format!("{}: {e}", dir.display())))? {
        let p = e.map_err(|e| io(e.to_string()))?.path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        let Some(stem) = name.strip_suffix(".wasm").filter(|s| !s.ends_with(".component")) else { continue };
        let core = std::fs::read(&p).map_err(|e| io(format!("{}: {e}", p.display())))?;
        let component = componentize(&core)?;
        let dst = dir.join(format!("{stem}.component.wasm"));
        if std::fs::read(&dst).ok().as_deref() != Some(&component[..]) {
            std::fs::write(&dst, &component).map_err(|e| io(format!("{}: {e}", dst.display())))?;
        }
        out.insert(stem.to_string(), dst);
    }
    Ok(out)
}
