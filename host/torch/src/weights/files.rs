//! Which files hold a checkpoint: one `<stem>.safetensors`, or the shards its
//! `<stem>.safetensors.index.json` lists (each a plain name in the folder).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// The files of the checkpoint `dir/<stem>.safetensors`, or of its shards listed in
/// `dir/<stem>.safetensors.index.json`, in order.
pub fn checkpoint_files(dir: &Path, stem: &str) -> Result<Vec<PathBuf>> {
    let single = dir.join(format!("{stem}.safetensors"));
    let index = dir.join(format!("{stem}.safetensors.index.json"));
    if single.exists() {
        Ok(vec![single])
    } else if index.exists() {
        shard_files(&index)
    } else {
        bail!("{}: neither {stem}.safetensors nor {stem}.safetensors.index.json exists", dir.display())
    }
}

/// The shard file names a `*.safetensors.index.json` lists, each once, in name order. A name
/// must be a plain file in the model folder (no directories, no `..`, no absolute path), so an
/// index cannot point the loader at files elsewhere.
pub fn index_shards(text: &str) -> Result<Vec<String>> {
    let json: serde_json::Value = serde_json::from_str(text).context("not valid JSON")?;
    let Some(map) = json.get("weight_map").and_then(|m| m.as_object()) else {
        bail!("no `weight_map` object");
    };
    let mut files = BTreeSet::new();
    for (key, v) in map {
        let Some(f) = v.as_str() else { bail!("weight_map.{key}: the shard must be a file name string") };
        // A plain name on every platform: no separator of any OS (`\` is one on Windows), no NUL.
        let plain = Path::new(f).file_name().is_some_and(|n| n == f) && !f.contains(['\\', ':', '\0']);
        if !plain || !f.ends_with(".safetensors") {
            bail!("weight_map.{key}: `{f}` is not a .safetensors file name in the model folder");
        }
        files.insert(f.to_string());
    }
    if files.is_empty() {
        bail!("`weight_map` lists no tensors");
    }
    Ok(files.into_iter().collect())
}

fn shard_files(index: &Path) -> Result<Vec<PathBuf>> {
    let text = std::fs::read_to_string(index).with_context(|| format!("reading {}", index.display()))?;
    let names = index_shards(&text).with_context(|| index.display().to_string())?;
    let dir = index.parent().unwrap_or(Path::new("."));
    let files: Vec<PathBuf> = names.iter().map(|f| dir.join(f)).collect();
    for f in &files {
        if !f.exists() {
            bail!("{}: shard {} listed in the index does not exist", index.display(), f.display());
        }
    }
    Ok(files)
}
