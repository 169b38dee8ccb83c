//! `sleep`/`wake` for a served Wan model: its transformer's linears (all but a sliver of its
//! parameters) leave the device and come back, as `--offload-experts` moves an expert; the text
//! encoder, the VAE and the small tensors stay. Two tiers:
//!
//! - [`TransformerResidency`] keeps them in pinned host memory: the copy is made at the first
//!   sleep and kept, so later sleeps only repoint, and a wake copies into fresh device tensors;
//! - [`DiskResidency`] keeps nothing: a sleep frees them (host memory too), and a wake reads them
//!   again from the model folder's checkpoint, as a weight update does.
//!
//! A model loaded lazily (`LoadOptions::lazy_transformer`) starts asleep in either tier: its
//! first wake reads the linears from the checkpoint.
//!
//! Only for models whose weights never change in place (no merged LoRA adapters, no weight
//! updates): the engine gives those to extra models, never the primary.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use anyhow::{ensure, Result};
use fastvideo_layers::offload::{host_copy, map_linears, map_linears_of, point, Groups};
use fastvideo_pipeline::Residency;
use tch::Tensor;

use crate::transformer::WanTransformer3DModel;
use crate::WanModel;

/// The host tier of `sleep`/`wake`: the transformer's linears wait in pinned host memory.
pub struct TransformerResidency {
    model: WanModel,
    bytes: u64,
    host: Mutex<Option<Groups>>,
    awake: AtomicBool,
}

// SAFETY: the linears are repointed only in `sleep` and `wake`, which the engine runs on its
// executor thread between units of work; the host copies sit behind the mutex.
unsafe impl Send for TransformerResidency {}
unsafe impl Sync for TransformerResidency {}

impl TransformerResidency {
    /// Residency for `model`'s transformer; a model loaded lazily starts asleep.
    pub fn new(model: &WanModel) -> Self {
        let awake = AtomicBool::new(model.load_report.deferred_linear_bytes.is_none());
        Self { model: model.share(), bytes: resident_bytes(model), host: Mutex::new(None), awake }
    }
}

impl Residency for TransformerResidency {
    fn sleep(&self) -> Result<()> {
        let mut host = self.host.lock().unwrap_or_else(|e| e.into_inner());
        let t = &self.model.transformer;
        let copy = host.get_or_insert_with(|| host_copy(&t.linear_groups(), self.model.device));
        point(&t.linear_groups(), copy);
        self.awake.store(false, Ordering::Relaxed);
        Ok(())
    }

    fn wake(&self) -> Result<()> {
        let host = self.host.lock().unwrap_or_else(|e| e.into_inner());
        match host.as_ref() {
            Some(copy) => {
                let on_device = map_linears_of(copy, |t| t.to_device(self.model.device));
                point(&self.model.transformer.linear_groups(), &on_device);
            }
            // Never slept: a model loaded lazily, whose linears were never read.
            None => read_linears(&self.model)?,
        }
        self.awake.store(true, Ordering::Relaxed);
        Ok(())
    }

    fn bytes(&self) -> u64 {
        self.bytes
    }

    fn is_resident(&self) -> bool {
        self.awake.load(Ordering::Relaxed)
    }
}

/// Device bytes of `model`'s transformer linears once resident: those on the device now and
/// those a lazy load deferred (so call it before a lazy model's first wake, as the residencies
/// here do once). A two-expert model counts both experts, or one when `--offload-experts` keeps
/// one on the device at a time; streamed blocks count as the slots they pass through. What a
/// weight budget counts for it.
pub fn resident_bytes(model: &WanModel) -> u64 {
    let held = |t: &WanTransformer3DModel| -> u64 {
        let size = |t: &Tensor| t.numel() as u64 * t.kind().elt_size_in_bytes() as u64;
        let all: u64 = map_linears(&t.linear_groups(), |w| w.shallow_clone())
            .iter()
            .flatten()
            .map(|(w, b)| size(w) + b.as_ref().map_or(0, size))
            .sum();
        // Streamed blocks (`--max-device-memory`) take their slots on the device, not their size.
        let host = t.block_stream().map_or(0, |s| {
            let (blocks, slots, bytes) = s.shape();
            (blocks - slots) as u64 * bytes
        });
        all - host
    };
    let second = match (&model.low_noise, &model.offload) {
        (Some(expert), None) => held(&expert.transformer),
        _ => 0,
    };
    held(&model.transformer) + second + model.load_report.deferred_linear_bytes.unwrap_or(0)
}

/// Reads `model`'s transformer linears from its checkpoint onto its device.
fn read_linears(model: &WanModel) -> Result<()> {
    let fresh = crate::update::load_transformer(model, &model.dir)?;
    point(&model.transformer.linear_groups(), &map_linears(&fresh.linear_groups(), |w| w.shallow_clone()));
    Ok(())
}

/// The disk tier: asleep, the transformer's linears take no memory at all.
pub struct DiskResidency {
    model: WanModel,
    bytes: u64,
    awake: AtomicBool,
}

// SAFETY: as for `TransformerResidency`: repointed only in `sleep` and `wake`, on the executor
// thread between units of work.
unsafe impl Send for DiskResidency {}
unsafe impl Sync for DiskResidency {}

impl DiskResidency {
    /// Refused for FP8 linears (their scales live outside the tensors a wake repoints) and for a
    /// transformer read from a single file (a wake reads the folder).
    pub fn new(model: &WanModel) -> Result<Self> {
        ensure!(
            !model.load_report.fp8_linears,
            "a model with FP8 linears cannot sleep to disk (sleep to host memory instead)"
        );
        // A wake reads the folder's checkpoint: not the single file (nor its quantized blocks).
        if let Some(f) = &model.load_report.transformer_file {
            anyhow::bail!(
                "a model whose transformer is the file {} cannot sleep to disk (sleep to host memory instead)",
                f.display()
            );
        }
        let awake = AtomicBool::new(model.load_report.deferred_linear_bytes.is_none());
        Ok(Self { model: model.share(), bytes: resident_bytes(model), awake })
    }
}

impl Residency for DiskResidency {
    fn sleep(&self) -> Result<()> {
        let t = &self.model.transformer;
        let groups = t.linear_groups();
        point(&groups, &map_linears(&groups, |w| Tensor::empty([0], (w.kind(), w.device()))));
        self.awake.store(false, Ordering::Relaxed);
        Ok(())
    }

    fn wake(&self) -> Result<()> {
        read_linears(&self.model)?;
        self.awake.store(true, Ordering::Relaxed);
        Ok(())
    }

    fn bytes(&self) -> u64 {
        self.bytes
    }

    fn is_resident(&self) -> bool {
        self.awake.load(Ordering::Relaxed)
    }
}
