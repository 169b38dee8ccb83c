//! LoRA on the Wan transformer: adapters prepared for its linear modules, the unmerged path
//! (each row group's deltas added to a linear's output), and merging a set into the weights with
//! the originals kept on the host, so unmerging restores them bit for bit.

use anyhow::{Context, Result};
use fastvideo_lora::{KeyMap, LoraFile, TargetModule};
use fastvideo_pipeline::{AdapterSet, AdapterTarget, PreparedAdapter};
use tch::Device;

use crate::lora_keys::WanKeys;
use crate::{Umt5Encoder, WanTransformer3DModel};

/// A Wan model as adapters see it: the transformer (a two-expert model's two), and the text
/// encoder for files that carry text-encoder keys (diffusers' `text_encoder.*` names). Merging
/// touches the transformers only, each with the part of the set bound to it; text-encoder
/// adapters always run unmerged (prompts are encoded once, and cached per set).
pub struct WanAdapters {
    /// The experts, in order (one for most models; the experts share one module table).
    pub experts: Vec<std::sync::Arc<WanTransformer3DModel>>,
    /// The text encoder, for adapters with text-encoder keys (always unmerged).
    pub text_encoder: std::sync::Arc<Umt5Encoder>,
    /// The key of the whole set merged into the experts, if one is.
    merged: std::sync::Mutex<Option<String>>,
    /// Experts swap between device and host (`--offload-experts`), stream blocks from host
    /// memory (`--max-device-memory`), or their weights are stored in FP8 (`--fp8-linears`):
    /// never merged.
    frozen: bool,
}

impl WanAdapters {
    /// The adapter targets of `model`: its experts and its text encoder.
    pub fn of(model: &crate::WanModel) -> Self {
        Self {
            experts: model.experts(),
            text_encoder: model.text_encoder.clone(),
            merged: Default::default(),
            frozen: model.offload.is_some()
                || model.experts().iter().any(|t| t.has_quantized_linears() || t.block_stream().is_some()),
        }
    }

    fn experts(&self) -> impl Iterator<Item = (u32, &WanTransformer3DModel)> {
        self.experts.iter().enumerate().map(|(i, t)| (i as u32, &**t))
    }

    /// Expert 0: the module table and the text path are read through it.
    fn transformer(&self) -> &WanTransformer3DModel {
        &self.experts[0]
    }
}

impl AdapterTarget for WanAdapters {
    fn modules(&self) -> &[TargetModule] {
        self.transformer().modules()
    }
    fn key_map(&self) -> &dyn KeyMap {
        &WanKeys
    }
    fn check(&self, file: &LoraFile) -> std::result::Result<(), fastvideo_lora::LoraError> {
        file.check(self.transformer().modules())?;
        file.check_text(self.text_encoder.modules())
    }
    fn prepare(&self, file: &LoraFile, name: &str, hash: &str) -> Result<PreparedAdapter> {
        let mut a = self.transformer().prepare_adapter(file, name, hash)?;
        if !file.text.is_empty() {
            prepare_text(file, &mut a, &self.text_encoder, self.transformer().patch_device())?;
        }
        Ok(a)
    }
    fn merge(&self, set: &AdapterSet) -> Result<()> {
        anyhow::ensure!(
            !self.frozen,
            "adapters run unmerged on a model whose experts are offloaded or whose weights are stored in FP8"
        );
        let mut merged = self.merged.lock().unwrap_or_else(|e| e.into_inner());
        *merged = None;
        for (e, t) in self.experts() {
            if let Err(err) = t.merge_adapters(set.for_expert(e)) {
                self.experts().for_each(|(_, t)| t.unmerge_adapters());
                return Err(err);
            }
        }
        *merged = Some(set.key().to_string());
        Ok(())
    }
    fn unmerge(&self) {
        let mut merged = self.merged.lock().unwrap_or_else(|e| e.into_inner());
        self.experts().for_each(|(_, t)| t.unmerge_adapters());
        *merged = None;
    }
    fn merged(&self) -> Option<String> {
        self.merged.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
    fn can_merge(&self) -> bool {
        !self.frozen
    }
}

impl AdapterTarget for WanTransformer3DModel {
    fn modules(&self) -> &[TargetModule] {
        WanTransformer3DModel::modules(self)
    }
    fn key_map(&self) -> &dyn KeyMap {
        &WanKeys
    }
    fn prepare(&self, file: &LoraFile, name: &str, hash: &str) -> Result<PreparedAdapter> {
        self.prepare_adapter(file, name, hash)
    }
    fn merge(&self, set: &AdapterSet) -> Result<()> {
        self.merge_adapters(set)
    }
    fn unmerge(&self) {
        self.unmerge_adapters()
    }
    fn merged(&self) -> Option<String> {
        self.merged_adapters()
    }
}

/// The text encoder's part of `file` for `adapter` (prepared for the transformer already).
pub fn prepare_text(file: &LoraFile, adapter: &mut PreparedAdapter, text: &Umt5Encoder, device: Device) -> Result<()> {
    file.check_text(text.modules()).with_context(|| format!("adapter `{}`", adapter.name))?;
    let (deltas, bytes) = fastvideo_layers::adapters::deltas(&file.text, text.modules(), device, &text.module_kinds())?;
    adapter.text = deltas;
    adapter.bytes += bytes;
    Ok(())
}
