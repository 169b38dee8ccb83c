//! LoRA on a model's [`Linear`]s, for every family: adapters prepared for the model's module
//! table (its slots), a set merged into the weights with the originals kept on the host so that
//! unmerging restores them bit for bit, and which rows still run unmerged while a set is merged.
//! A family holds one [`LinearAdapters`] per adapted model and lists its linears ([`LinearModel`],
//! which [`Adapted`] serves as an adapter target); the unmerged path itself is
//! [`Linear::forward_lora`].

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use anyhow::{bail, ensure, Context, Result};
use fastvideo_lora::{KeyMap, LoraFile, ModulePatch, TargetModule, TensorData};
use fastvideo_pipeline::{AdapterRows, AdapterSet, AdapterTarget, ModuleDelta, PreparedAdapter};
use tch::{Device, Kind, Tensor};

use crate::Linear;

/// One adapted model's module table and the set merged into its weights, if any.
pub struct LinearAdapters {
    /// Every linear module by slot (checkpoint name and shape): what adapters may target.
    modules: Vec<TargetModule>,
    /// The merged set, with the weights it replaced.
    merged: Mutex<Option<Merged>>,
}

impl LinearAdapters {
    /// Adapters over `modules` (the [`Weights`](fastvideo_torch::weights::Weights)' linears
    /// once the model is built).
    pub fn new(modules: Vec<TargetModule>) -> Self {
        Self { modules, merged: Mutex::new(None) }
    }

    /// The linear modules adapters may target, by slot.
    pub fn modules(&self) -> &[TargetModule] {
        &self.modules
    }

    /// Each module's weight dtype, by slot: the linear's own (float32 for the modules a family
    /// keeps in full precision), `compute` for a quantized one (FP8, GGUF blocks). Adapter tensors take their module's.
    pub fn kinds(&self, linears: &[&Linear], compute: Kind) -> Vec<Kind> {
        let mut kinds = vec![compute; self.modules.len()];
        for lin in linears {
            for p in lin.parts() {
                kinds[p.slot] = if lin.is_quantized() { compute } else { lin.weight.kind() };
            }
        }
        kinds
    }

    /// `file` prepared for these modules on `device`, each tensor in its module's dtype
    /// (`kinds`, by slot). The file is checked against the table first, so an error names the key.
    pub fn prepare(
        &self,
        file: &LoraFile,
        name: &str,
        hash: &str,
        device: Device,
        kinds: &[Kind],
    ) -> Result<PreparedAdapter> {
        prepare(file, name, hash, &self.modules, device, kinds)
    }

    /// Merges `set` into `linears` (the model's, in a fixed order), after restoring the weights
    /// from any other merged set: forwards then run rows with exactly this set at the plain
    /// model's cost. Call between forwards only.
    pub fn merge(&self, linears: &[&Linear], set: &AdapterSet) -> Result<()> {
        ensure!(
            !linears.iter().any(|l| l.is_quantized()),
            "adapters cannot merge into quantized weights (FP8 or GGUF blocks); they run unmerged"
        );
        let mut merged = self.merged.lock().unwrap_or_else(|e| e.into_inner());
        if merged.as_ref().is_some_and(|m| m.key == set.key()) {
            return Ok(());
        }
        if let Some(m) = merged.take() {
            unmerge(linears, m);
        }
        if !set.is_empty() {
            *merged = Some(merge(linears, set)?);
        }
        Ok(())
    }

    /// Merges `set` for good (no originals kept): a weight update made of an adapter. Only on a
    /// model no forward uses yet.
    pub fn merge_permanently(&self, linears: &[&Linear], set: &AdapterSet) -> Result<()> {
        ensure!(self.merged().is_none(), "adapters are merged already");
        ensure!(
            !linears.iter().any(|l| l.is_quantized()),
            "adapters cannot merge into quantized weights (FP8 or GGUF blocks); merge before quantizing"
        );
        drop(merge(linears, set)?);
        Ok(())
    }

    /// Restores the original weights (bit for bit) if a set is merged. Call between forwards only.
    pub fn unmerge(&self, linears: &[&Linear]) {
        let mut merged = self.merged.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = merged.take() {
            unmerge(linears, m);
        }
    }

    /// The key of the merged set, if any.
    pub fn merged(&self) -> Option<String> {
        self.merged.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map(|m| m.key.clone())
    }

    /// The row groups still to add unmerged of a forward of `batch` rows: those whose set is not
    /// the merged one. A row with another set (or none) while one is merged would compute on the
    /// wrong weights: refused.
    pub fn unmerged_rows<'a>(&self, rows: Option<&AdapterRows<'a>>, batch: i64) -> Result<Option<AdapterRows<'a>>> {
        let groups = rows.map_or(&[][..], |r| &r.groups[..]);
        let Some(merged) = self.merged() else {
            return Ok(rows.filter(|r| !r.is_empty()).map(|r| AdapterRows { groups: r.groups.clone(), text: false }));
        };
        let covered: i64 = groups.iter().filter(|(s, _, _)| s.key() == merged).map(|(_, _, l)| l).sum();
        ensure!(
            covered == batch,
            "{covered} of {batch} rows run with the merged adapters `{merged}`; the others would compute on the \
             wrong weights"
        );
        Ok(None)
    }

    /// Each sample's set still to add unmerged, for a pack whose samples each name theirs (or
    /// none): all of them with no set merged, none when every sample runs the merged set, an
    /// error otherwise (see [`unmerged_rows`](Self::unmerged_rows)).
    pub fn unmerged_sets<'a>(&self, sets: &[Option<&'a AdapterSet>]) -> Result<Vec<Option<&'a AdapterSet>>> {
        let Some(merged) = self.merged() else {
            return Ok(sets.iter().map(|s| s.filter(|s| !s.is_empty())).collect());
        };
        let covered = sets.iter().filter(|s| s.is_some_and(|s| s.key() == merged)).count();
        ensure!(
            covered == sets.len(),
            "{covered} of {} samples run with the merged adapters `{merged}`; the others would compute on the \
             wrong weights",
            sets.len()
        );
        Ok(vec![None; sets.len()])
    }
}

/// `file`'s tensors on `device`, by the slots of `modules` (the model's module table), each in
/// its module's dtype (`kinds`, by slot). Every module the file names must exist with the shapes
/// it implies: the file is checked against the table first, so an error names the key.
fn prepare(
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

/// `patches` on `device`, each in its module's dtype, by the slots of `modules`; and their bytes.
pub fn deltas(
    patches: &BTreeMap<String, ModulePatch>,
    modules: &[TargetModule],
    device: Device,
    kinds: &[Kind],
) -> Result<(Vec<Option<ModuleDelta>>, u64)> {
    let slots: HashMap<&str, usize> = modules.iter().enumerate().map(|(i, m)| (m.name.as_str(), i)).collect();
    let mut deltas: Vec<Option<ModuleDelta>> = (0..modules.len()).map(|_| None).collect();
    let mut bytes = 0u64;
    for (module, patch) in patches {
        let slot = *slots.get(module.as_str()).with_context(|| format!("module `{module}` is not in the table"))?;
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
struct Merged {
    key: String,
    /// Linear index (in the model's order), original weight and bias, on the host.
    originals: Vec<(usize, Tensor, Option<Tensor>)>,
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
fn merge(linears: &[&Linear], set: &AdapterSet) -> Result<Merged> {
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
fn unmerge(linears: &[&Linear], merged: Merged) {
    for (i, w, b) in merged.originals {
        let lin = linears[i];
        lin.weight.shallow_clone().copy_(&w);
        if let (Some(b), Some(bias)) = (b, &lin.bias) {
            bias.shallow_clone().copy_(&b);
        }
    }
}

/// What a model whose adapters act on its [`Linear`]s brings, for [`Adapted`] to serve LoRA on it.
pub trait LinearModel: Send + Sync {
    /// Its module table and merged set.
    fn linear_adapters(&self) -> &LinearAdapters;
    /// Every linear, in a fixed order (merging walks them).
    fn adapted_linears(&self) -> Vec<&Linear>;
    /// Its compute dtype (what an FP8 linear's deltas are kept in).
    fn compute_kind(&self) -> Kind;
    /// Where its weights, and so the adapters' tensors, live.
    fn adapter_device(&self) -> Device;
    /// Its family's LoRA names in the original and kohya formats.
    fn lora_keys(&self) -> &'static dyn KeyMap;
}

/// A [`LinearModel`] as an [`AdapterTarget`]: LoRA on its linears (text-encoder keys refused).
pub struct Adapted<M>(pub Arc<M>);

impl<M: LinearModel> AdapterTarget for Adapted<M> {
    fn modules(&self) -> &[TargetModule] {
        self.0.linear_adapters().modules()
    }
    fn key_map(&self) -> &dyn KeyMap {
        self.0.lora_keys()
    }
    fn prepare(&self, file: &LoraFile, name: &str, hash: &str) -> Result<PreparedAdapter> {
        let (m, linears) = (&self.0, self.0.adapted_linears());
        let kinds = m.linear_adapters().kinds(&linears, m.compute_kind());
        m.linear_adapters().prepare(file, name, hash, m.adapter_device(), &kinds)
    }
    fn merge(&self, set: &AdapterSet) -> Result<()> {
        anyhow::ensure!(!set.is_bound(), "a set bound to one loop runs unmerged");
        self.0.linear_adapters().merge(&self.0.adapted_linears(), set)
    }
    /// One transformer: a set whose entries bind to one loop of a two-stage recipe (LTX-2's
    /// `refine`) has two weight sets in turn, so it runs unmerged.
    fn merges(&self, set: &AdapterSet) -> bool {
        !set.is_bound()
    }
    fn unmerge(&self) {
        self.0.linear_adapters().unmerge(&self.0.adapted_linears())
    }
    fn merged(&self) -> Option<String> {
        self.0.linear_adapters().merged()
    }
}

impl<M> std::ops::Deref for Adapted<M> {
    type Target = M;
    fn deref(&self) -> &M {
        &self.0
    }
}
