//! `--transformer FILE`: a folder's transformer weights replaced by one safetensors file as
//! ComfyUI and the original Wan releases publish it — the original key layout
//! (`blocks.0.self_attn.q.weight`, `head.modulation`), bare or under `model.diffusion_model.`,
//! or diffusers' names. The layout is told from the keys; every key must be a tensor of the
//! folder's transformer and every tensor it needs must be there, else the load is refused naming
//! the file and the key. The folder's `transformer/config.json` gives the architecture.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{bail, Result};
use fastvideo_lora::checkpoint_name;
use tch::{Device, Kind};

use crate::lora_keys::WanKeys;
use crate::weights::Weights;

/// The transformer's weights: from `file` when one is given (`two_experts`: refused, one file
/// replaces one transformer), else the folder's `t_dir`; with the file's key of each tensor.
pub fn or_folder(
    file: Option<&Path>,
    t_dir: &Path,
    two_experts: bool,
    device: Device,
    kind: Kind,
) -> Result<(Weights, HashMap<String, String>)> {
    let Some(file) = file else {
        return Ok((Weights::from_dir(t_dir, "diffusion_pytorch_model", device, kind)?, HashMap::new()));
    };
    anyhow::ensure!(
        !two_experts,
        "--transformer {}: this folder has two transformers (Wan 2.2 A14B); one file replaces one",
        file.display()
    );
    weights(file, device, kind)
}

/// The file's tensors under the model's names, and by model name the key the file uses.
pub fn weights(file: &Path, device: Device, kind: Kind) -> Result<(Weights, HashMap<String, String>)> {
    let names = safetensor_keys(file)?;
    let strip = |k: &str| {
        k.strip_prefix("model.diffusion_model.").or_else(|| k.strip_prefix("diffusion_model.")).map(str::to_string)
    };
    // diffusers' names (some repacks keep them): the condition embedder gives them away.
    let diffusers = names.iter().any(|k| strip(k).unwrap_or_else(|| k.clone()).starts_with("condition_embedder."));
    let rename = |key: &str| -> Result<String> {
        if diffusers {
            return Ok(strip(key).unwrap_or_else(|| key.to_string()));
        }
        checkpoint_name(&WanKeys, key).map_err(|why| anyhow::anyhow!("{}: `{key}` {why}", file.display()))
    };
    Weights::from_file_renamed(file, device, kind, &rename)
}

/// Refuses a file with tensors the model did not read, naming the first as the file spells it.
pub fn check_all_used(w: &Weights, stored: &HashMap<String, String>, file: &Path) -> Result<()> {
    if let Some(first) = w.unused().first() {
        let key = stored.get(first).unwrap_or(first);
        bail!("{}: `{key}` is not a tensor of this folder's transformer (the model's `{first}`)", file.display());
    }
    Ok(())
}

/// An error about the model's tensor `name` told with the file's key for it.
pub fn in_file_terms(e: anyhow::Error, stored: &HashMap<String, String>) -> anyhow::Error {
    let msg = format!("{e:#}");
    let named = stored.iter().find(|(name, _)| msg.contains(&format!("`{name}`")));
    match named {
        Some((name, key)) if key != name => {
            anyhow::anyhow!("{}", msg.replace(&format!("`{name}`"), &format!("`{key}` (the model's `{name}`)")))
        }
        _ => e,
    }
}

/// The tensor names of a safetensors file (its header only).
fn safetensor_keys(file: &Path) -> Result<Vec<String>> {
    use std::io::Read;
    let mut f = std::fs::File::open(file).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    let mut len = [0u8; 8];
    f.read_exact(&mut len)
        .map_err(|_| anyhow::anyhow!("{}: not a safetensors file (shorter than its header)", file.display()))?;
    let n = u64::from_le_bytes(len);
    anyhow::ensure!(n < 100 << 20, "{}: not a safetensors file (a header of {n} bytes)", file.display());
    let mut header = vec![0u8; n as usize];
    f.read_exact(&mut header)
        .map_err(|_| anyhow::anyhow!("{}: not a safetensors file (truncated header)", file.display()))?;
    let v: serde_json::Value = serde_json::from_slice(&header)
        .map_err(|e| anyhow::anyhow!("{}: not a safetensors file (its header is not JSON: {e})", file.display()))?;
    Ok(v.as_object().map(|m| m.keys().filter(|k| *k != "__metadata__").cloned().collect()).unwrap_or_default())
}
