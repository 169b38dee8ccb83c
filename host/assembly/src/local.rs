//! Local commands through the serving path: a request run in this process on an engine built
//! exactly as `fastvideo serve` builds it (the registry's loading, plugins bound by the model's
//! name, the deploy's adapters and their merging), so a local run and a served one of the same
//! request cannot drift apart.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use fastvideo_engine::EngineError;
use fastvideo_plugin_host::Deployment;
use fastvideo_request::{ModelLimits, OmniEvent, OmniOutput, OmniRequest};

use crate::config::{ModelConfig, ServeConfig};
use crate::engine::{build_engine_with, Assembly};

/// An engine serving one model folder for local runs.
pub struct LocalEngine {
    assembly: Assembly,
    runtime: tokio::runtime::Runtime,
}

impl LocalEngine {
    /// An engine over the folder `dir`, served by the name `name` (plugins bind by it), loaded
    /// with `model`'s options, with the deploy file `deploy`. Admission keeps only the request's
    /// own checks: a local run is not refused for its predicted time or memory.
    pub fn start(model: &ModelConfig, dir: &Path, name: &str, deploy: Option<&Path>) -> Result<Self> {
        let loaded = crate::engine::deploy_at(deploy)?;
        Self::build(model, dir, name, deploy, loaded)
    }

    /// [`start`](Self::start) with the deploy at `file` already loaded as `deploy`.
    pub fn start_with(
        model: &ModelConfig,
        dir: &Path,
        name: &str,
        file: &Path,
        deploy: Arc<Deployment>,
    ) -> Result<Self> {
        Self::build(model, dir, name, Some(file), Some(deploy))
    }

    fn build(
        model: &ModelConfig,
        dir: &Path,
        name: &str,
        file: Option<&Path>,
        deploy: Option<Arc<Deployment>>,
    ) -> Result<Self> {
        let mut cfg = ServeConfig {
            model: ModelConfig { path: Some(dir.to_path_buf()), name: Some(name.to_string()), ..model.clone() },
            deploy: file.map(Path::to_path_buf),
            ..ServeConfig::default()
        };
        cfg.scheduler.memory_mib = Some(u64::MAX >> 20);
        let assembly = build_engine_with(&cfg, deploy)?;
        let runtime = tokio::runtime::Builder::new_current_thread().build().context("starting a local runtime")?;
        Ok(Self { assembly, runtime })
    }

    /// What the model accepts.
    pub fn limits(&self) -> &ModelLimits {
        self.assembly.engine.limits()
    }

    /// Runs `req` to its end, telling `on_event` of each event as it happens.
    pub fn run(&self, req: OmniRequest, on_event: &mut dyn FnMut(&OmniEvent)) -> Result<OmniOutput, EngineError> {
        let mut handle = self.assembly.engine.submit(req)?;
        self.runtime.block_on(async {
            // The job's event sender goes when the job ends; its output is sent before.
            while let Some(e) = handle.events.recv().await {
                on_event(&e);
            }
            handle.output.await.unwrap_or(Err(EngineError::Stopped))
        })
    }
}
