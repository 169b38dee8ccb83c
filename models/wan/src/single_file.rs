//! `--transformer FILE`: a folder's transformer weights replaced by one safetensors file as
//! ComfyUI and the original Wan releases publish it — the original key layout
//! (`blocks.0.self_attn.q.weight`, `head.modulation`), bare or under `model.diffusion_model.`,
//! or diffusers' names. The layout is told from the keys; every key must be a tensor of the
//! folder's transformer and every tensor it needs must be there, else the load is refused naming
//! the file and the key. The folder's `transformer/config.json` gives the architecture.

use std::path::Path;

use anyhow::Result;
pub use fastvideo_layers::single_file::{check_all_used, quantized_formats};
use fastvideo_layers::single_file::{strip_prefix, SCALED_FP8};
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
        let strip = |k: &str| strip_prefix(k).to_string();
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
