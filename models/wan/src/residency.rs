//! `sleep`/`wake` for a served Wan model: its transformer's linears (all but a sliver of its
//! parameters) leave the device and come back, as `--offload-experts` moves an expert; the text
//! encoder, the VAE and the small tensors stay. Two tiers:
//!
//! - [`TransformerResidency`] keeps them in pinned host memory: the copy is made at the first
//!   sleep and kept, so later sleeps only repoint, and a wake copies into fresh device tensors;
//! - [`DiskResidency`] keeps nothing: a sleep frees them (host memory too), and a wake reads them
//!   again from the model folder's checkpoint, as a weight update does.
//!
//! Only for models whose weights never change in place (no merged LoRA adapters, no weight
//! updates): the engine gives those to extra models, never the primary.

use std::sync::{Arc, Mutex};

use anyhow::{anyhow, ensure, Result};
use fastvideo_pipeline::Residency;
use tch::{Device, Tensor};

use crate::offload::{host_copy, map_linears, map_linears_of, point, Groups};
use crate::transformer::WanTransformer3DModel;
use crate::WanModel;

pub struct TransformerResidency {
    transformer: Arc<WanTransformer3DModel>,
    device: Device,
    host: Mutex<Option<Groups>>,
}

// SAFETY: the linears are repointed only in `sleep` and `wake`, which the engine runs on its
// executor thread between units of work; the host copies sit behind the mutex.
unsafe impl Send for TransformerResidency {}
unsafe impl Sync for TransformerResidency {}

impl TransformerResidency {
    pub fn new(transformer: Arc<WanTransformer3DModel>, device: Device) -> Self {
        Self { transformer, device, host: Mutex::new(None) }
    }
}

impl Residency for TransformerResidency {
    fn sleep(&self) -> Result<()> {
        let mut host = self.host.lock().unwrap_or_else(|e| e.into_inner());
        let copy = host.get_or_insert_with(|| host_copy(&self.transformer, self.device));
        point(&self.transformer, copy);
        Ok(())
    }

    fn wake(&self) -> Result<()> {
        let host = self.host.lock().unwrap_or_else(|e| e.into_inner());
        let copy = host.as_ref().ok_or_else(|| anyhow!("wake before any sleep"))?;
        let on_device = map_linears_of(copy, |t| t.to_device(self.device));
        point(&self.transformer, &on_device);
        Ok(())
    }
}

/// The disk tier: asleep, the transformer's linears take no memory at all.
pub struct DiskResidency {
    model: WanModel,
}

// SAFETY: as for `TransformerResidency`: repointed only in `sleep` and `wake`, on the executor
// thread between units of work.
unsafe impl Send for DiskResidency {}
unsafe impl Sync for DiskResidency {}

impl DiskResidency {
    /// Refused for FP8 linears (their scales live outside the tensors a wake repoints).
    pub fn new(model: &WanModel) -> Result<Self> {
        ensure!(
            !model.load_report.fp8_linears,
            "a model with FP8 linears cannot sleep to disk (sleep to host memory instead)"
        );
        Ok(Self { model: model.share() })
    }
}

impl Residency for DiskResidency {
    fn sleep(&self) -> Result<()> {
        let t = &self.model.transformer;
        point(t, &map_linears(t, |w| Tensor::empty([0], (w.kind(), w.device()))));
        Ok(())
    }

    fn wake(&self) -> Result<()> {
        let fresh = crate::update::load_transformer(&self.model, &self.model.dir)?;
        point(&self.model.transformer, &map_linears(&fresh, |w| w.shallow_clone()));
        Ok(())
    }
}
