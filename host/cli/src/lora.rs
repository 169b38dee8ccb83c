//! `--lora NAME_OR_FILE[=SCALE]` for local runs, and `fastvideo lora inspect FILE`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use fastvideo_lora::{LoraError, LoraFile};
use fastvideo_pipeline::{
    AdapterCache, AdapterSet, AdapterSource, AdapterTarget, PipelineSpec, Value, Values, ADAPTERS,
};
use fastvideo_request::{LoraChoice, LoraExpert, LoraUse, OmniRequest, ResolvedRequest};

/// Adapters for one local run.
#[derive(Args, Clone, Debug, Default)]
pub struct LoraArgs {
    /// A LoRA adapter to run with: a name the --deploy enables, or a .safetensors file (diffusers,
    /// original `diffusion_model.` keys as ComfyUI loads them for Wan, FLUX.2 and Qwen-Image, or
    /// kohya keys); `=SCALE` sets its strength (default: the deploy's,
    /// or 1 for a file). Repeatable; adapters stack in order. On a two-expert model (Wan 2.2
    /// A14B) an adapter binds to both experts, or with `@high_noise` / `@low_noise` to one; on a
    /// two-stage recipe (LTX-2 `--two-stage`) `@base` / `@refine` binds it to one loop.
    #[arg(long = "lora", value_name = "NAME_OR_FILE[=SCALE][@EXPERT]")]
    pub lora: Vec<String>,
    /// Device memory for prepared adapters, in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 2048)]
    pub adapter_cache: u64,
}

/// `NAME_OR_FILE[=SCALE]`: the part after the last `=` is a strength when it reads as a number.
fn split(arg: &str) -> Result<(&str, Option<f64>)> {
    if let Some((name, scale)) = arg.rsplit_once('=') {
        if let Ok(s) = scale.trim().parse::<f64>() {
            return Ok((name, Some(s)));
        }
        if !Path::new(arg).exists() {
            bail!("--lora {arg}: `{scale}` is not a number (give NAME_OR_FILE=SCALE)");
        }
    }
    Ok((arg, None))
}

impl LoraArgs {
    /// The request's `lora` choices, and the files named on the command line as adapter
    /// sources (each named by its file stem, hashed now).
    pub fn choices(&self) -> Result<(Vec<LoraChoice>, Vec<AdapterSource>)> {
        let (mut choices, mut files) = (Vec::new(), Vec::<AdapterSource>::new());
        for arg in &self.lora {
            // A two-expert model's adapter for one expert: `...@high_noise` / `...@low_noise`.
            let (arg, expert) = match arg.rsplit_once('@') {
                Some((a, "high_noise")) => (a, Some(LoraExpert::HighNoise)),
                Some((a, "low_noise")) => (a, Some(LoraExpert::LowNoise)),
                // A two-stage recipe's adapter for one loop (LTX-2: `...@refine`).
                Some((a, "base")) => (a, Some(LoraExpert::Base)),
                Some((a, "refine")) => (a, Some(LoraExpert::Refine)),
                _ => (arg.as_str(), None),
            };
            let (spec, scale) = split(arg)?;
            let path = Path::new(spec);
            let name = if path.extension().is_some_and(|e| e == "safetensors") || path.is_file() {
                let bytes = std::fs::read(path).with_context(|| format!("--lora {spec}"))?;
                let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| spec.into());
                let name = if files.iter().any(|f| f.name == stem) { spec.to_string() } else { stem };
                files.push(AdapterSource {
                    name: name.clone(),
                    path: path.to_path_buf(),
                    blake3: blake3::hash(&bytes).to_hex().to_string(),
                    default_scale: 1.0,
                });
                name
            } else {
                spec.to_string()
            };
            choices.push(LoraChoice { name, scale, expert });
        }
        Ok((choices, files))
    }

    /// Puts the choices on `r`; the sources they need come back for [`values`].
    pub fn apply(&self, r: &mut OmniRequest) -> Result<Vec<AdapterSource>> {
        let (choices, files) = self.choices()?;
        r.lora = choices;
        Ok(files)
    }
}

/// The run's values with `req`'s adapters prepared for `spec`'s model (from the deploy's
/// `[[adapters]]` and the files on the command line); empty when it names none.
pub fn values(
    spec: &PipelineSpec,
    req: &ResolvedRequest,
    sources: Vec<AdapterSource>,
    cache_mib: u64,
) -> Result<Values> {
    let mut values = Values::default();
    if req.lora.is_empty() {
        return Ok(values);
    }
    let Some(target) = &spec.adapters else {
        bail!("--lora: this model takes no LoRA adapters (its family has none, or its transformer runs parallel over --gpus)");
    };
    if let Some(set) = set_for(Arc::clone(target), sources, &req.lora, cache_mib)? {
        values.insert(ADAPTERS, Value::Adapters(set));
    }
    Ok(values)
}

/// The prepared set `lora` names among `sources`, for `target`.
pub fn set_for(
    target: Arc<dyn AdapterTarget>,
    sources: Vec<AdapterSource>,
    lora: &[LoraUse],
    cache_mib: u64,
) -> Result<Option<Arc<AdapterSet>>> {
    let max = lora.len().max(fastvideo_pipeline::DEFAULT_MAX_LORAS_PER_REQUEST);
    let cache = AdapterCache::new(target, sources, cache_mib << 20, max)?;
    cache.check(lora)?;
    cache.set_for(lora)
}

impl LoraArgs {
    /// The adapters of a run outside a pipeline (`bench`): files only, every forward on
    /// `target` runs with them.
    pub fn set(&self, target: Arc<dyn AdapterTarget>) -> Result<Option<Arc<AdapterSet>>> {
        let (choices, files) = self.choices()?;
        let lora = fastvideo_request::resolve_lora(&choices)?;
        set_for(target, files, &lora, self.adapter_cache)
    }
}

#[derive(Subcommand)]
pub enum LoraCommand {
    /// What a LoRA file holds, read without running it: format, ranks, alphas, targeted modules,
    /// size, and its blake3 for a deploy's `[[adapters]]`.
    Inspect(InspectArgs),
}

#[derive(Args)]
pub struct InspectArgs {
    /// The .safetensors file.
    file: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(cmd: LoraCommand) -> Result<()> {
    match cmd {
        LoraCommand::Inspect(a) => {
            let bytes = std::fs::read(&a.file).with_context(|| a.file.display().to_string())?;
            let file = parse_for_any_family(&bytes).with_context(|| a.file.display().to_string())?;
            let hash = blake3::hash(&bytes).to_hex().to_string();
            let summary = file.summary();
            let text = if a.json {
                let mut j = summary.to_json();
                j["blake3"] = hash.into();
                j["file"] = a.file.display().to_string().into();
                format!("{}\n", serde_json::to_string_pretty(&j)?)
            } else {
                format!("file:         {}\nblake3:       {hash}\n{summary}", a.file.display())
            };
            // A closed pipe (`| head`) is not an error worth a panic.
            let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes());
            Ok(())
        }
    }
}

/// `bytes` read with the first family's LoRA key map (in the registry's order) that places every
/// key: inspect has no model at hand, and a file's names say whose it is. A file no family
/// places gets the first family's error, which names the key.
fn parse_for_any_family(bytes: &[u8]) -> Result<LoraFile, LoraError> {
    let mut first = None;
    for map in fastvideo_models::registry().lora_key_maps() {
        match LoraFile::parse(bytes, map) {
            Ok(file) => return Ok(file),
            Err(e) => {
                first.get_or_insert(e);
            }
        }
    }
    Err(first.unwrap_or_else(|| LoraError { key: None, message: "no model family here takes LoRA adapters".into() }))
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn a_strength_follows_the_last_equals_sign() {
        assert_eq!(split("style=0.8").unwrap(), ("style", Some(0.8)));
        assert_eq!(split("a/b=c.safetensors=-1").unwrap(), ("a/b=c.safetensors", Some(-1.0)));
        assert_eq!(split("style").unwrap(), ("style", None));
        assert!(split("style=strong").is_err());
    }
}
