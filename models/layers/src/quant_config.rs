//! `quantization_config` in a transformer's `config.json`, as NVIDIA ModelOpt (and diffusers'
//! exports of it) write FP8 checkpoints: `quant_method`, `quant_algo` and the `ignore` list of
//! modules left unquantized. The FP8 weights themselves (`weight_scale` beside each) are read by
//! `Weights::get_linear`; this checks the file agrees with its list.

use std::path::Path;

use anyhow::{bail, Result};
use fastvideo_lora::TargetModule;
use fastvideo_torch::weights::Weights;
use serde::Deserialize;
use tch::Kind;

use crate::config::unsupported;

/// The keys read; others (`producer`, `kv_cache_quant_algo`, …) describe the export.
#[derive(Clone, Debug, Deserialize)]
pub struct QuantizationConfig {
    /// `modelopt`.
    pub quant_method: String,
    /// `FP8` (per-tensor e4m3 weights and activations); other algorithms are refused.
    #[serde(default)]
    pub quant_algo: Option<String>,
    /// Modules left unquantized: names or patterns with `*` (`proj_out`, `condition_embedder*`).
    #[serde(default, alias = "modules_to_not_convert")]
    pub ignore: Vec<String>,
}

impl QuantizationConfig {
    /// Refuses a method or algorithm this runtime does not run, naming the key.
    pub fn check(&self, path: &Path) -> Result<()> {
        if !self.quant_method.eq_ignore_ascii_case("modelopt") {
            return Err(unsupported(path, "quantization_config.quant_method", &self.quant_method, "modelopt"));
        }
        match self.quant_algo.as_deref() {
            Some(a) if a.eq_ignore_ascii_case("fp8") => Ok(()),
            other => Err(unsupported(path, "quantization_config.quant_algo", other.unwrap_or("(none)"), "FP8")),
        }
    }

    /// Whether `module` is on the ignore list.
    pub fn ignores(&self, module: &str) -> bool {
        self.ignore.iter().any(|p| glob(p, module))
    }

    /// Refuses a linear on the ignore list that the checkpoint stores in FP8 anyway (the list
    /// and the weights disagree: the file is not what its config says).
    pub fn check_weights(&self, path: &Path, modules: &[TargetModule], w: &Weights) -> Result<()> {
        for m in modules {
            let fp8 =
                matches!(w.stored(&format!("{}.weight", m.name)), Some((Kind::Float8e4m3fn | Kind::Float8e5m2, _)));
            if fp8 && self.ignores(&m.name) {
                bail!(
                    "{}: `{}` is on quantization_config.ignore, but its weight is stored in FP8",
                    path.display(),
                    m.name
                );
            }
        }
        Ok(())
    }
}

/// `pattern` (with `*` for any run of characters) matches all of `name`.
fn glob(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = name.strip_prefix(first) else { return false };
    let parts: Vec<&str> = parts.collect();
    for (i, p) in parts.iter().enumerate() {
        if i == parts.len() - 1 {
            return rest.ends_with(p);
        }
        match rest.find(p) {
            Some(at) => rest = &rest[at + p.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}
