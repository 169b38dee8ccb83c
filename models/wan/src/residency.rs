//! `sleep`/`wake` for a served Wan model: its transformer's linears (all but a sliver of its
//! parameters) move to pinned host memory and back, as `--offload-experts` moves an expert; the
//! text encoder, the VAE and the small tensors stay. The host copy is made at the first sleep and
//! kept (the "pinned host" tier), so later sleeps only repoint; a wake copies into fresh device
//! tensors. Only for models whose weights never change in place (no merged LoRA adapters, no
//! weight updates): the engine gives those to extra models, never the primary.

use std::sync::{Arc, Mutex};

use anyhow::{anyhow, Result};
use fastvideo_pipeline::Residency;
use tch::Device;

use crate::offload::{host_copy, map_linears_of, point, Groups};
use crate::transformer::WanTransformer3DModel;

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
