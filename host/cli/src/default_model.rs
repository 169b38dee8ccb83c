//! Where the default model (shipped in the repository under `models/default/`) is found.

use std::path::PathBuf;

use anyhow::{bail, Result};

/// The first existing of: `$FASTVIDEO_DEFAULT_MODEL`, the source tree this binary was built
/// from, `./models/default`, and `<exe>/../../models/default` (a binary copied with its tree).
pub fn locate() -> Result<PathBuf> {
    let mut candidates = Vec::new();
    if let Some(p) = std::env::var_os("FASTVIDEO_DEFAULT_MODEL") {
        candidates.push(PathBuf::from(p));
    }
    candidates.push(PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/default")));
    candidates.push(PathBuf::from("models/default"));
    if let Ok(exe) = std::env::current_exe() {
        if let Some(dir) = exe.parent() {
            candidates.push(dir.join("../../models/default"));
        }
    }
    for c in &candidates {
        if c.join("model_index.json").exists() {
            return Ok(c.canonicalize().unwrap_or_else(|_| c.clone()));
        }
    }
    bail!(
        "no --model given and the default model was not found (looked in {}); set FASTVIDEO_DEFAULT_MODEL",
        candidates.iter().map(|c| c.display().to_string()).collect::<Vec<_>>().join(", ")
    )
}
