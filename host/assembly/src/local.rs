//! Local commands through the serving path: a request run in this process on an engine built
//! exactly as `fastvideo serve` builds it (the registry's loading, plugins bound by the model's
//! name, the deploy's adapters and their merging), so a local run and a served one of the same
//! request cannot drift apart.
//!
//! Tools that run many requests on one pipeline in a loop (`generate`, the `eval` suites) run
//! each with [`run_once`]: the pipeline a loaded model built ([`crate::LoadedModel::pipeline`]),
//! run to its end in this thread with no scheduler between, since one process runs one request
//! at a time.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use fastvideo_engine::EngineError;
use fastvideo_pipeline::{CancelToken, PipelineRun, PipelineSpec, Values};
use fastvideo_plugin_host::Deployment;
use fastvideo_request::{ModelLimits, OmniEvent, OmniOutput, OmniRequest, ResolvedRequest};
use tch::Device;

use crate::config::{ModelConfig, ServeConfig};
use crate::engine::{build_engine_with, Assembly};

/// An engine serving one model folder for local runs.
pub struct LocalEngine {
    assembly: Assembly,
    runtime: tokio::runtime::Runtime,
}

impl LocalEngine {
    /// An engine over the folder `dir`, served by the name `name` (plugins bind by it), loaded
    /// with `model`'s options, with the deploy `deploy` (read from `file`) whose adapters for
    /// this model are limited to those named in `lora`: a local run checks and prepares the
    /// adapters it runs, not every file the deploy lists. Admission keeps only the request's own
    /// checks: a local run is not refused for its predicted time or memory, or its adapter count.
    pub fn start(
        model: &ModelConfig,
        dir: &Path,
        name: &str,
        file: &Path,
        deploy: &Deployment,
        lora: &[String],
    ) -> Result<Self> {
        let adapters =
            deploy.adapters_for(name, true).into_iter().filter(|a| lora.iter().any(|l| a.answers_to(l))).collect();
        let deploy = Deployment {
            runtime: deploy.runtime.clone(),
            plugins: deploy.plugins.clone(),
            workflows: deploy.workflows.clone(),
            adapters,
            world_adapters: Vec::new(),
            model_adapters: Default::default(),
        };
        let mut cfg = ServeConfig {
            model: ModelConfig { path: Some(dir.to_path_buf()), name: Some(name.to_string()), ..model.clone() },
            deploy: Some(file.to_path_buf()),
            ..ServeConfig::default()
        };
        cfg.scheduler.memory_mib = Some(u64::MAX >> 20);
        cfg.adapters.max_per_request = usize::MAX;
        cfg.validate()?;
        let assembly = build_engine_with(&cfg, Some(Arc::new(deploy)))?;
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

/// Runs `req` on `spec` to its end in this thread, with request-provided `values` (e.g. its
/// prepared adapters), telling `on_event` of each event as it happens; answers the output.
pub fn run_once(
    spec: Arc<PipelineSpec>,
    req: ResolvedRequest,
    device: Device,
    values: Values,
    on_event: &mut dyn FnMut(&OmniEvent),
) -> Result<OmniOutput> {
    run_until(spec, req, device, values, CancelToken::default(), on_event)
}

/// [`run_once`] that stops early when `cancel` is set (from `on_event`, say): the run then
/// fails with `cancelled`.
pub fn run_until(
    spec: Arc<PipelineSpec>,
    req: ResolvedRequest,
    device: Device,
    values: Values,
    cancel: CancelToken,
    on_event: &mut dyn FnMut(&OmniEvent),
) -> Result<OmniOutput> {
    let mut run = PipelineRun::new(spec, req, device, values, cancel);
    run.run_to_end(&mut |e| on_event(&e))?;
    run.finish(&mut |e| on_event(&e))
}
