//! What the engine serves: one model's pipeline on one device, with the model's own checks.

use std::sync::Arc;

pub use fastvideo_pipeline::Residency;
use fastvideo_pipeline::{AdapterCache, PipelineSpec, WorkCount};
use fastvideo_request::{ModelLimits, RequestError, ResolvedRequest};
use tch::Device;

use crate::WeightUpdates;

/// Classifies a run's error into a short stable code (e.g. `plugin_failed`).
pub type Classifier = fn(&anyhow::Error) -> &'static str;

/// Extra admission check beyond the model's limits (plugin parameters against the deploy).
pub type RequestCheck = Box<dyn Fn(&ResolvedRequest) -> Result<(), RequestError> + Send + Sync>;

/// What the engine serves: one model's pipeline on one device.
pub struct EngineModel {
    /// The id requests name it by (`model`).
    pub id: String,
    /// What requests for it may ask; checked at admission.
    pub limits: ModelLimits,
    /// Its pipeline, which the executor runs requests through.
    pub spec: Arc<PipelineSpec>,
    /// The device its pipeline runs on.
    pub device: Device,
    /// Its extra admission check beyond the limits.
    pub check: RequestCheck,
    /// Its unit of work per forward for a request (the cost model's key), as the model counts it.
    pub work: WorkCount,
    /// Turns its run errors into codes for clients and metrics.
    pub classify: Classifier,
    /// How to load other weights (`update_weights`); none refuses updates.
    pub weights: Option<WeightUpdates>,
    /// The LoRA adapters requests may name; none refuses every `lora` field.
    pub adapters: Option<Arc<AdapterCache>>,
    /// How its large weights leave the device and come back (`sleep`/`wake`); none: always
    /// resident.
    pub residency: Option<Arc<dyn Residency>>,
}
