//! Building a model's pipeline around other transformer weights (RL weight updates). Defined
//! below the engine so model families implement it without depending on the engine, which
//! swaps pipelines between units of work.

use std::path::Path;

use crate::PipelineSpec;

/// Builds a model's pipeline with other transformer weights (implemented by the model family).
pub trait WeightLoader: Send + Sync {
    /// The pipeline with the weights at `path` (a safetensors file, or a folder holding the
    /// component's checkpoint). Errors name the file and the tensor.
    fn load(&self, path: &Path) -> anyhow::Result<PipelineSpec>;
    /// The content hash (blake3 hex) of the weights at `path`, as the engine's `WeightsInfo`
    /// reports.
    fn hash(&self, path: &Path) -> anyhow::Result<String>;
}
