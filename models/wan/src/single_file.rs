//! `--transformer FILE`: a folder's transformer weights replaced by one safetensors file as
//! ComfyUI and the original Wan releases publish it — the original key layout
//! (`blocks.0.self_attn.q.weight`, `head.modulation`), bare or under `model.diffusion_model.`,
//! or diffusers' names. The layout is told from the keys; every key must be a tensor of the
//! folder's transformer and every tensor it needs must be there, else the load is refused naming
//! the file and the key. The folder's `transformer/config.json` gives the architecture.

use std::path::Path;

use anyhow::{bail, Result};
use fastvideo_lora::checkpoint_name;
use tch::{Device, Kind};

use crate::lora_keys::WanKeys;
use crate::weights::Weights;

/// The transformer's weights: from `file` when one is given (`two_experts`: refused, one file
/// replaces one transformer), else the folder's `t_dir`.
pub fn or_folder(file: Option<&Path>, t_dir: &Path, two_experts: bool, device: Device, kind: Kind) -> Result<Weights> {
    let Some(file) = file else {
        return Weights::from_dir(t_dir, "diffusion_pytorch_model", device, kind);
    };
    anyhow::ensure!(
        !two_experts,
        "--transformer {}: this folder has two transformers (Wan 2.2 A14B); one file replaces one",
        file.display()
    );
    weights(file, device, kind)
}

/// The file's tensors under the model's names.
pub fn weights(file: &Path, device: Device, kind: Kind) -> Result<Weights> {
    let rename = |keys: &[String]| -> Result<Vec<String>> {
        let strip = |k: &str| {
            k.strip_prefix("model.diffusion_model.")
                .or_else(|| k.strip_prefix("diffusion_model."))
                .unwrap_or(k)
                .to_string()
        };
        // diffusers' names (some repacks keep them): the condition embedder gives them away.
        if keys.iter().any(|k| strip(k).starts_with("condition_embedder.")) {
            return Ok(keys.iter().map(|k| strip(k)).collect());
        }
        let name = |k: &String| {
            // ComfyUI's fp8_scaled marker: an empty tensor whose dtype names the FP8 type.
            if strip(k) == SCALED_FP8 {
                return Ok(SCALED_FP8.to_string());
            }
            checkpoint_name(&WanKeys, k).map_err(|why| anyhow::anyhow!("{}: `{k}` {why}", file.display()))
        };
        keys.iter().map(name).collect()
    };
    Weights::from_file_renamed(file, device, kind, &rename)
}

/// The file's quantized formats as a load report names them (`GGUF Q4_K ×20, Q6_K ×8`), when it
/// holds any.
pub fn quantized_formats(w: &Weights, kept_fp8: bool) -> Option<String> {
    let types = w.ggml_types();
    if !types.is_empty() {
        let list: Vec<String> = types.iter().map(|(t, n)| format!("{t} ×{n}")).collect();
        return Some(format!("GGUF {}, dequantized per layer", list.join(", ")));
    }
    let fp8 = w.fp8_count();
    let how = if kept_fp8 { "run by the FP8 GEMM" } else { "dequantized at load" };
    (fp8 > 0).then(|| format!("FP8 (scaled) ×{fp8}, {how}"))
}

/// ComfyUI's marker of an `fp8_scaled` file (`comfy/utils.py`): no weight of the model.
const SCALED_FP8: &str = "scaled_fp8";

/// Refuses a file with tensors the model did not read, naming the first as the file spells it.
pub fn check_all_used(w: &Weights, file: &Path) -> Result<()> {
    if let Some(first) = w.unused().iter().find(|k| *k != SCALED_FP8) {
        let key = w.stored_name(first);
        bail!("{}: `{key}` is not a tensor of this folder's transformer (the model's `{first}`)", file.display());
    }
    Ok(())
}
