//! `--transformer FILE` for any family: one file as ComfyUI and the original releases publish a
//! transformer (safetensors or GGUF, told by its first bytes), keys bare or under
//! `model.diffusion_model.`/`diffusion_model.`, read in place of a folder's transformer weights;
//! and the checks and reports every family shares. A family whose original names are diffusers'
//! (Qwen-Image) reads it with [`diffusers_named`]; one with its own layout (Wan) renames through
//! its key map and uses the rest.

use std::path::Path;

use anyhow::{bail, Result};
use fastvideo_torch::weights::Weights;
use tch::{Device, Kind};

/// ComfyUI's marker of an `fp8_scaled` file (`comfy/utils.py`): no weight of the model.
pub const SCALED_FP8: &str = "scaled_fp8";

/// `key` without ComfyUI's or the original release's prefix.
pub fn strip_prefix(key: &str) -> &str {
    key.strip_prefix("model.diffusion_model.").or_else(|| key.strip_prefix("diffusion_model.")).unwrap_or(key)
}

/// The file's tensors under diffusers' names, for a family whose single files use them (with or
/// without the prefix).
pub fn diffusers_named(file: &Path, device: Device, kind: Kind) -> Result<Weights> {
    let rename =
        |keys: &[String]| -> Result<Vec<String>> { Ok(keys.iter().map(|k| strip_prefix(k).to_string()).collect()) };
    Weights::from_file_renamed(file, device, kind, &rename)
}

/// Refuses a file with tensors the model did not read, naming the first as the file spells it.
pub fn check_all_used(w: &Weights, file: &Path) -> Result<()> {
    if let Some(first) = w.unused().iter().find(|k| *k != SCALED_FP8) {
        let key = w.stored_name(first);
        bail!("{}: `{key}` is not a tensor of this folder's transformer (the model's `{first}`)", file.display());
    }
    Ok(())
}

/// The checkpoint's quantized formats as a load report names them (`GGUF Q4_K ×20, Q6_K ×8,
/// dequantized per layer`, `FP8 (scaled) ×400, 380 run by the FP8 GEMM, 20 dequantized at
/// load`), when it holds any.
pub fn quantized_formats(w: &Weights) -> Option<String> {
    let types = w.ggml_types();
    if !types.is_empty() {
        let list: Vec<String> = types.iter().map(|(t, n)| format!("{t} ×{n}")).collect();
        return Some(format!("GGUF {}, dequantized per layer", list.join(", ")));
    }
    let (fp8, kept) = (w.fp8_count(), w.kept_fp8_count());
    let how = match kept {
        0 => "dequantized at load".to_string(),
        k if k == fp8 => "run by the FP8 GEMM".to_string(),
        k => format!("{k} run by the FP8 GEMM, {} dequantized at load", fp8 - k),
    };
    (fp8 > 0).then(|| format!("FP8 (scaled) ×{fp8}, {how}"))
}
