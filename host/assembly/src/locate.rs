//! Where the models shipped in the repository (`models/default/`, `models/default-i2v/`,
//! `models/world/`) are found, for every front end alike.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

/// The first existing of: `$FASTVIDEO_DEFAULT_MODEL`, the source tree this crate was built
/// from, `./models/default`, and `<exe>/../../models/default` (a binary copied with its tree).
pub fn default_model() -> Result<PathBuf> {
    shipped("default", "FASTVIDEO_DEFAULT_MODEL")
}

/// The shipped image-to-video model (`models/default-i2v/`, `$FASTVIDEO_DEFAULT_I2V_MODEL`): the
/// default model grown into Wan 2.1 image-to-video, which commands use when given a first frame
/// and no model.
pub fn default_i2v_model() -> Result<PathBuf> {
    shipped("default-i2v", "FASTVIDEO_DEFAULT_I2V_MODEL")
}

/// The shipped world model (`models/world/`), found the same way (`$FASTVIDEO_WORLD_MODEL`).
pub fn world_model() -> Result<PathBuf> {
    shipped("world", "FASTVIDEO_WORLD_MODEL")
}

/// A `[workflows.models]` folder of a deploy: `default` is the embedded default model, anything
/// `default-i2v` the shipped image-to-video model, anything else is relative to the deploy file.
pub fn workflow_model_folder(deploy_file: &Path, folder: &str) -> Result<PathBuf> {
    match folder {
        "default" => return default_model(),
        "default-i2v" => return default_i2v_model(),
        _ => {}
    }
    Ok(deploy_file.parent().unwrap_or(Path::new(".")).join(folder))
}

fn shipped(name: &str, env: &str) -> Result<PathBuf> {
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
