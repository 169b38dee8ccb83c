//! Loading the served model as a [`ModelConfig`] says: where it is, its name, dtypes, kernels
//! and parallel layout. Every command that loads a model goes through here.

use std::path::{Path, PathBuf};

use anyhow::Result;
use fastvideo_models::{registry, Family, LoadContext, LoadedModel, ModelKind};
use tch::Device;

use crate::config::ModelConfig;
use crate::locate;

/// A model folder and the name clients ask for it by.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelLocation {
    /// The folder the model loads from.
    pub dir: PathBuf,
    /// The name clients ask for it by.
    pub name: String,
    /// The embedded default model (no `path` given).
    pub embedded: bool,
}

impl ModelConfig {
    /// The device `device` names (`auto` picks CUDA when present).
    pub fn torch_device(&self) -> Result<Device> {
        fastvideo_torch::device(&self.device)
    }

    /// The folder (`path`, else the embedded default model) and the served name (`name`, else
    /// the folder's name, or `fastvideo-default` for the embedded model).
    pub fn locate(&self) -> Result<ModelLocation> {
        let (dir, embedded) = match &self.path {
            Some(p) => (p.clone(), false),
            None => (locate::default_model()?, true),
        };
        let name = match (&self.name, embedded) {
            (Some(n), _) => n.clone(),
            (None, true) => "fastvideo-default".into(),
            (None, false) => dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or("model".into()),
        };
        Ok(ModelLocation { dir, name, embedded })
    }

    /// Applies `kernels` (process-wide), detects the family serving `dir` as `kind` (refused
    /// before any weights load when none does, naming the architecture and the supported ones)
    /// and loads it with these dtypes and this layout. `lazy`: its large weights are read at the
    /// first wake. Callers name the flag or field and the folder in the error's context.
    pub fn load_model(&self, dir: &Path, kind: ModelKind, device: Device, lazy: bool) -> Result<Box<dyn LoadedModel>> {
        let family = registry().detect(dir, kind)?;
        self.apply_kernels();
        let ctx = LoadContext { lazy, ..self.context(device, family)? };
        family.load(dir, &ctx)
    }

    /// What loading a model of `family` on `device` is asked for: the numerics its family
    /// implies for the preset, the layout and the options.
    pub fn context(&self, device: Device, family: &dyn Family) -> Result<LoadContext> {
        let numerics = self.numerics_of(device, family)?;
        Ok(LoadContext {
            tiny_decoder: self.tiny_decoder,
            offload_experts: self.offload_experts,
            gpus: self.gpus,
            parallel: self.parallel,
            transformer: self.transformer.clone(),
            max_device_memory: self.max_device_memory,
            ..LoadContext::new(device, numerics)
        })
    }

    fn apply_kernels(&self) {
        if !self.kernels {
            // Only ever switched off here, so `FASTVIDEO_NO_KERNELS` still holds with the default.
            fastvideo_kernels::set_enabled(false);
        }
    }

    /// What `precision`, `dtype` and `vae_dtype` come to on `device` for a model of `family`
    /// (`fast` implies what its gate admitted), with the explicit options on top; a conflict
    /// (`exact` with a lower dtype) is an error naming the field.
    pub fn numerics_of(&self, device: Device, family: &dyn Family) -> Result<fastvideo_torch::Numerics> {
        let n = self.precision.numerics(device, self.dtype, self.vae_dtype).map_err(anyhow::Error::msg)?;
        self.with_options(family.implies(n, device))
    }

    /// The explicit lossy options on top of a preset's numerics; conflicts name the fields.
    fn with_options(&self, n: fastvideo_torch::Numerics) -> Result<fastvideo_torch::Numerics> {
        anyhow::ensure!(
            !(self.tiny_decoder && n.preset == fastvideo_torch::Precision::Exact),
            "tiny_decoder with precision = exact, which takes no lossy path; use bf16 or fast"
        );
        use fastvideo_torch::Int8Attention;
        let recipe = match (self.int8_attention, self.int8_qk_attention) {
            (true, true) => anyhow::bail!(
                "int8_attention and int8_qk_attention are two recipes of one kernel; set one (docs/benchmarks.md \
                 compares them)"
            ),
            (true, false) => Some(Int8Attention::Fp8Pv),
            (false, true) => Some(Int8Attention::F16Pv),
            (false, false) => None,
        };
        n.with_fp8_linears(self.fp8_linears).and_then(|n| n.with_int8_attention(recipe)).map_err(anyhow::Error::msg)
    }
}
