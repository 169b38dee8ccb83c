//! LoRA on the Wan transformer: adapters prepared for its linear modules, the unmerged path
//! (each row group's deltas added to a linear's output), and merging a set into the weights with
//! the originals kept on the host, so unmerging restores them bit for bit.

use std::collections::HashMap;

use anyhow::{bail, Context, Result};
use fastvideo_layers::Linear;
use fastvideo_lora::{KeyMap, LoraFile, TargetModule, TensorData};
use fastvideo_pipeline::{AdapterSet, AdapterTarget, ModuleDelta, PreparedAdapter};
use tch::{Device, Kind, Tensor};

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
    /// Experts swap between device and host (`--offload-experts`), or their weights are stored
    /// in FP8 (`--fp8-linears`): never merged.
    frozen: bool,
}

impl WanAdapters {
    /// The adapter targets of `model`: its experts and its text encoder.
    pub fn of(model: &crate::WanModel) -> Self {
        Self {
            experts: model.experts(),
            text_encoder: model.text_encoder.clone(),
            merged: Default::default(),
            frozen: model.offload.is_some() || model.experts().iter().any(|t| t.has_fp8()),
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

/// `file`'s tensors on `device`, by the slots of `modules` (the model's module table), each in
/// its module's dtype (`kinds`, by slot: the compute dtype, or float32 for the modules diffusers
/// keeps in full precision, such as the timestep embedder). Every module the file names must
/// exist with the shapes it implies: the file is checked against the table first, so an error
/// names the key.
pub fn prepare(
    file: &LoraFile,
    name: &str,
    hash: &str,
    modules: &[TargetModule],
    device: Device,
    kinds: &[Kind],
) -> Result<PreparedAdapter> {
    file.check(modules).with_context(|| format!("adapter `{name}`"))?;
    let (deltas, bytes) = deltas(&file.modules, modules, device, kinds)?;
    Ok(PreparedAdapter { name: name.to_string(), hash: hash.to_string(), deltas, text: Vec::new(), bytes })
}

/// The text encoder's part of `file` for `adapter` (prepared for the transformer already).
pub fn prepare_text(file: &LoraFile, adapter: &mut PreparedAdapter, text: &Umt5Encoder, device: Device) -> Result<()> {
    file.check_text(text.modules()).with_context(|| format!("adapter `{}`", adapter.name))?;
    let (deltas, bytes) = deltas(&file.text, text.modules(), device, &text.module_kinds())?;
    adapter.text = deltas;
    adapter.bytes += bytes;
    Ok(())
}

/// `patches` on `device`, each in its module's dtype, by the slots of `modules`; and their bytes.
fn deltas(
    patches: &std::collections::BTreeMap<String, fastvideo_lora::ModulePatch>,
    modules: &[TargetModule],
    device: Device,
    kinds: &[Kind],
) -> Result<(Vec<Option<ModuleDelta>>, u64)> {
    let slots: HashMap<&str, usize> = modules.iter().enumerate().map(|(i, m)| (m.name.as_str(), i)).collect();
    let mut deltas: Vec<Option<ModuleDelta>> = (0..modules.len()).map(|_| None).collect();
    let mut bytes = 0u64;
    for (module, patch) in patches {
        let slot = slots[module.as_str()];
        let kind = kinds[slot];
        let mut load = |t: &TensorData| -> Result<Tensor> {
            let t = tensor(t, device, kind)?;
            bytes += (t.numel() * kind.elt_size_in_bytes()) as u64;
            Ok(t)
        };
        let low_rank = match (&patch.down, &patch.up) {
            (Some(d), Some(u)) => Some((load(d)?, load(u)?, patch.scale())),
            _ => None,
        };
        let diff = patch.diff.as_ref().map(&mut load).transpose()?;
        let diff_b = patch.diff_b.as_ref().map(&mut load).transpose()?;
        deltas[slot] = Some(ModuleDelta { low_rank, diff, diff_b });
    }
    Ok((deltas, bytes))
}

/// A file tensor (f32, f16 or bf16 little-endian bytes) as a tensor on `device` in `kind`.
fn tensor(t: &TensorData, device: Device, kind: Kind) -> Result<Tensor> {
    let stored = match t.dtype {
        fastvideo_lora::Dtype::F32 => Kind::Float,
        fastvideo_lora::Dtype::F16 => Kind::Half,
        fastvideo_lora::Dtype::BF16 => Kind::BFloat16,
    };
    let shape: Vec<i64> = t.shape.iter().map(|&d| d as i64).collect();
    Ok(Tensor::f_from_data_size(&t.data, &shape, stored)?.to_device(device).to_kind(kind))
}

/// A set merged into the weights, with the original weights of every linear it touched.
pub(crate) struct Merged {
    key: String,
    /// Linear index (in the model's order), original weight and bias, on the host.
    originals: Vec<(usize, Tensor, Option<Tensor>)>,
}

impl Merged {
    pub(crate) fn key(&self) -> &str {
        &self.key
    }
}

/// A copy of `t` on the host (a new tensor even when `t` is there already).
fn host_copy(t: &Tensor) -> Tensor {
    if t.device() == Device::Cpu {
        t.copy()
    } else {
        t.to_device(Device::Cpu)
    }
}

/// Writes `set` into the weights of `linears`: `W + Σ s·scale·(up·down) + Σ s·diff` per module,
/// summed in float32 and rounded once. The originals are kept for [`unmerge`].
pub(crate) fn merge(linears: &[&Linear], set: &AdapterSet) -> Result<Merged> {
    let mut originals = Vec::new();
    for (i, lin) in linears.iter().enumerate() {
        let touched = lin.parts().iter().any(|p| set.entries().iter().any(|(a, _)| a.delta(p.slot).is_some()));
        if !touched {
            continue;
        }
        originals.push((i, host_copy(&lin.weight), lin.bias.as_ref().map(host_copy)));
        for part in lin.parts() {
            let mut rows = lin.weight.narrow(0, part.start, part.len);
            let mut w = rows.to_kind(Kind::Float);
            let mut b: Option<Tensor> = None;
            for (adapter, strength) in set.entries() {
                let Some(d) = adapter.delta(part.slot) else { continue };
                if let Some((down, up, scale)) = &d.low_rank {
                    w += up.to_kind(Kind::Float).mm(&down.to_kind(Kind::Float)) * (strength * scale);
                }
                if let Some(diff) = &d.diff {
                    w += diff.to_kind(Kind::Float) * *strength;
                }
                if let Some(db) = &d.diff_b {
                    let Some(bias) = &lin.bias else {
                        bail!("adapter `{}`: a bias difference for a linear without bias", adapter.name)
                    };
                    let acc = b.get_or_insert_with(|| bias.narrow(0, part.start, part.len).to_kind(Kind::Float));
                    *acc += db.to_kind(Kind::Float) * *strength;
                }
            }
            rows.copy_(&w.to_kind(lin.weight.kind()));
            if let (Some(b), Some(bias)) = (b, &lin.bias) {
                bias.narrow(0, part.start, part.len).copy_(&b.to_kind(bias.kind()));
            }
        }
    }
    Ok(Merged { key: set.key().to_string(), originals })
}

/// Restores the weights [`merge`] changed from the kept originals (bit for bit).
pub(crate) fn unmerge(linears: &[&Linear], merged: Merged) {
    for (i, w, b) in merged.originals {
        let lin = linears[i];
        lin.weight.shallow_clone().copy_(&w);
        if let (Some(b), Some(bias)) = (b, &lin.bias) {
            bias.shallow_clone().copy_(&b);
        }
    }
}
