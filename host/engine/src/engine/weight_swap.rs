//! Swapping the served weights while requests run: the new weights load off the executor, and
//! the executor switches only what requests not yet started will run on.

use std::sync::Arc;

use fastvideo_pipeline::PipelineSpec;
use tokio::sync::oneshot;

use super::command::Command;
use super::front::{Engine, ServedModel};
use crate::{EngineError, WeightUpdates, WeightsInfo};

impl Engine {
    /// Which weights new requests for model `model` (`None`: the primary) run on: epoch,
    /// content hash, source. The start weights' hash is computed on the first call (it reads the
    /// checkpoint once).
    pub async fn weights(&self, model: Option<&str>) -> Result<WeightsInfo, EngineError> {
        let served = self.served(model)?;
        let w = served.weights.clone().ok_or_else(|| no_updates(served))?;
        let _guard = served.update.lock().await;
        serving(served, &w).await
    }

    /// Loads the transformer weights at `path` (off the executor) for model `model` (`None`: the
    /// primary) and, if they load, makes them the ones every request for it not yet started runs
    /// on, as the next epoch. Requests already running finish on the weights they started with. A
    /// load that fails changes nothing. Updates are applied one at a time, in the order they
    /// arrive. `source` is what [`weights`](Self::weights) reports as their origin (the path when
    /// `None`; e.g. `upload` for a file that is deleted once loaded).
    pub async fn update_weights(
        &self,
        model: Option<&str>,
        path: std::path::PathBuf,
        source: Option<std::path::PathBuf>,
    ) -> Result<WeightsInfo, EngineError> {
        let inner = &self.0;
        let index = self.index_of(model)?;
        let served = &inner.models[index];
        let w = served.weights.clone().ok_or_else(|| no_updates(served))?;
        let _guard = served.update.lock().await;
        let current = serving(served, &w).await?;
        let (loader, p) = (w.loader.clone(), path.clone());
        let loaded = tokio::task::spawn_blocking(move || -> anyhow::Result<(PipelineSpec, String)> {
            let spec = loader.load(&p)?;
            Ok((spec, loader.hash(&p)?))
        })
        .await
        .map_err(|e| EngineError::Failed { code: "internal_error".into(), message: e.to_string() })?;
        let (mut spec, hash) = loaded.map_err(|e| EngineError::WeightsRefused(format!("{e:#}")))?;
        spec.weight_epoch = current.epoch + 1;
        let (tx, rx) = oneshot::channel();
        inner.tx.lock().unwrap().send(Command::Swap(index, Arc::new(spec), tx)).map_err(|_| EngineError::Stopped)?;
        rx.await.map_err(|_| EngineError::Stopped)?;
        let info = WeightsInfo::new(current.epoch + 1, hash, source.unwrap_or(path));
        *served.serving.lock().unwrap() = Some(info.clone());
        tracing::info!(model = %served.id, epoch = info.epoch, hash = %info.hash, source = %info.source.display(), "weights updated");
        Ok(info)
    }
}

/// A model without weight updates, named.
fn no_updates(served: &ServedModel) -> EngineError {
    EngineError::NoWeightUpdates(served.id.clone())
}

/// The serving weights of `served`; the caller holds its update lock.
async fn serving(served: &ServedModel, w: &WeightUpdates) -> Result<WeightsInfo, EngineError> {
    if let Some(info) = served.serving.lock().unwrap().clone() {
        return Ok(info);
    }
    let (loader, path) = (w.loader.clone(), w.initial.clone());
    let hash = tokio::task::spawn_blocking(move || loader.hash(&path))
        .await
        .map_err(|e| EngineError::Failed { code: "internal_error".into(), message: e.to_string() })?
        .map_err(|e| EngineError::Failed { code: "weights_unreadable".into(), message: format!("{e:#}") })?;
    let info = WeightsInfo::new(0, hash, w.initial.clone());
    *served.serving.lock().unwrap() = Some(info.clone());
    Ok(info)
}
