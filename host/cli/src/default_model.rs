//! Where the default model (shipped in the repository under `models/default/`) is found.

use std::path::PathBuf;

use anyhow::{bail, Result};

/// The first existing of: `$FASTVIDEO_DEFAULT_MODEL`, the source tree this binary was built
/// from, `./models/default`, and `<exe>/../../models/default` (a binary copied with its tree).
pub fn locate() -> Result<PathBuf> {
    locate_shipped("default", "FASTVIDEO_DEFAULT_MODEL")
}

/// The shipped world model (`models/world/`), found the same way (`$FASTVIDEO_WORLD_MODEL`).
pub fn locate_world() -> Result<PathBuf> {
    locate_shipped("world", "FASTVIDEO_WORLD_MODEL")
}

fn locate_shipped(name: &str, env: &str) -> Result<PathBuf> {
    let mut candidates = Vec::new();
    if let Some(p) = std::env::var_os(env) {
        candidates.push(PathBuf::from(p));
    }
    candidates.push(PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../models")).join(name));
    candidates.push(PathBuf::from("models").join(name));
    if let Ok(exe) = std::env::current_exe() {
        if let Some(dir) = exe.parent() {
            candidates.push(dir.join("../../models").join(name));
        }
    }
    for c in &candidates {
        if c.join("model_index.json").exists() {
            return Ok(c.canonicalize().unwrap_or_else(|_| c.clone()));
        }
    }
    bail!(
        "no --model given and the {name} model was not found (looked in {}); set {env}",
        candidates.iter().map(|c| c.display().to_string()).collect::<Vec<_>>().join(", ")
    )
}
