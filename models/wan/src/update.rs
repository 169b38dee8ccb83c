//! Weight updates for a loaded model (RL): the transformer rebuilt from another checkpoint of
//! the same architecture, and the pipeline around it rebuilt with the same policies. The text
//! encoder and VAE are shared with the running pipeline, not reloaded, so cached prompt
//! embeddings stay valid.
//!
//! An update may also be a LoRA file (a trainer that trains an adapter pushes megabytes, not the
//! model): the new weights are the last full checkpoint (the start weights, or the last one
//! loaded) with the adapter merged in at strength 1. Each push replaces the previous adapter;
//! adapters do not accumulate.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context, Result};
use fastvideo_lora::LoraFile;
use fastvideo_pipeline::WeightLoader;
use fastvideo_pipeline::{LoopPolicies, PipelineSpec};

use crate::loader::WanModel;
use crate::lora_keys::WanKeys;
use crate::pipeline::text_to_video_with;
use crate::transformer::WanTransformer3DModel;
use crate::weights::{checkpoint_files, Weights};

const STEM: &str = "diffusion_pytorch_model";

/// The checkpoint files at `path`: a `.safetensors` file; a transformer folder
/// (`diffusion_pytorch_model.safetensors` or its sharded index); or a model folder holding one
/// under `transformer/`.
pub fn transformer_files(path: &Path) -> Result<Vec<PathBuf>> {
    if path.is_file() {
        if path.extension().and_then(|e| e.to_str()) != Some("safetensors") {
            bail!("{}: not a .safetensors file", path.display());
        }
        return Ok(vec![path.to_path_buf()]);
    }
    if !path.is_dir() {
        bail!("{}: no such file or folder", path.display());
    }
    let sub = path.join("transformer");
    let dir = if sub.is_dir() { sub } else { path.to_path_buf() };
    checkpoint_files(&dir, STEM)
}

/// A new transformer for `model` from the checkpoint at `path`: same config, device and dtype.
/// Refused, naming the tensor, when a tensor is missing or has another shape, and when the
/// checkpoint holds tensors this architecture does not have (the weights of another model).
pub fn load_transformer(model: &WanModel, path: &Path) -> Result<WanTransformer3DModel> {
    Ok(crate::loader::with_lossy_options(
        load_unquantized(model, path)?,
        model.load_report.fp8_linears,
        model.load_report.int8_attention,
    ))
}

/// [`load_transformer`] before FP8 quantization (`--fp8-linears`): what a permanent LoRA merge
/// must add to, since FP8 weights hold no room for a delta.
fn load_unquantized(model: &WanModel, path: &Path) -> Result<WanTransformer3DModel> {
    let files = transformer_files(path)?;
    let kind = model.load_report.transformer_dtype;
    let w = Weights::from_files(&files, path, model.device, kind)?;
    let t = WanTransformer3DModel::new(model.transformer.cfg.clone(), &w)
        .with_context(|| format!("{}: not a checkpoint of this model's transformer", path.display()))?;
    let unused = w.unused();
    if let Some(first) = unused.first() {
        bail!(
            "{}: {} tensors this model's transformer does not have (first: `{first}`); the weights belong to another model",
            path.display(),
            unused.len()
        );
    }
    Ok(t)
}

/// blake3 of the checkpoint's bytes, every file in order.
pub fn checkpoint_hash(files: &[PathBuf]) -> Result<String> {
    let mut h = blake3::Hasher::new();
    for f in files {
        let file = std::fs::File::open(f).with_context(|| format!("opening {}", f.display()))?;
        h.update_reader(file).with_context(|| format!("reading {}", f.display()))?;
    }
    Ok(h.finalize().to_hex().to_string())
}

/// Rebuilds a served Wan pipeline with other transformer weights, keeping its policies.
pub struct WanWeightLoader {
    model: WanModel,
    policies: LoopPolicies,
    /// The last full checkpoint loaded (the start weights' folder first): what a LoRA update
    /// is merged onto.
    base: Mutex<PathBuf>,
}

impl WanWeightLoader {
    /// Updates for the pipeline built from `model` with `policies`.
    pub fn new(model: &WanModel, policies: LoopPolicies) -> Self {
        Self { model: model.share(), policies, base: Mutex::new(model.dir.join("transformer")) }
    }

    /// The LoRA file at `path`, if it is one (a checkpoint's keys are not LoRA keys).
    fn lora(path: &Path) -> Option<Result<LoraFile>> {
        if !path.is_file() {
            return None;
        }
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) => return Some(Err(anyhow::anyhow!("{}: {e}", path.display()))),
        };
        let st = safetensors::SafeTensors::deserialize(&bytes).ok()?;
        let names = st.names();
        let format = fastvideo_lora::Format::detect(names.iter().copied());
        let lora_keys = names.iter().any(|k| fastvideo_lora::place(&WanKeys, format, k).is_ok());
        if !lora_keys {
            return None;
        }
        Some(LoraFile::parse(&bytes, &WanKeys).with_context(|| format!("{}: a LoRA file", path.display())))
    }

    /// The base checkpoint with `file` merged in at strength 1.
    fn merged(&self, file: &LoraFile, path: &Path) -> Result<WanTransformer3DModel> {
        if let Some(k) = file.text.keys().next() {
            bail!(
                "{}: a weight update changes the transformer; this LoRA also has text-encoder keys (text_encoder.{k})",
                path.display()
            );
        }
        let base = self.base.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if !base.exists() {
            bail!(
                "{}: a LoRA update merges onto the last full checkpoint, {}, which is gone (an upload is not kept); \
                 load full weights by path first",
                path.display(),
                base.display()
            );
        }
        let t = load_unquantized(&self.model, &base)?;
        let adapter = t.prepare_adapter(file, "update", &checkpoint_hash(&[path.to_path_buf()])?)?;
        t.merge_permanently(&fastvideo_pipeline::AdapterSet::new(vec![(Arc::new(adapter), 1.0)]))?;
        Ok(crate::loader::with_lossy_options(
            t,
            self.model.load_report.fp8_linears,
            self.model.load_report.int8_attention,
        ))
    }
}

impl WeightLoader for WanWeightLoader {
    fn load(&self, path: &Path) -> Result<PipelineSpec> {
        // A new transformer would load whole onto the device, past the budget the stream keeps.
        anyhow::ensure!(
            self.model.transformer.block_stream().is_none(),
            "{}: weight updates load a whole transformer, which a model streaming blocks from host memory \
             (--max-device-memory) has no room for; restart with the new weights",
            path.display()
        );
        let t = match Self::lora(path) {
            Some(file) => Arc::new(self.merged(&file?, path)?),
            None => {
                let t = Arc::new(load_transformer(&self.model, path)?);
                *self.base.lock().unwrap_or_else(|e| e.into_inner()) = path.to_path_buf();
                t
            }
        };
        let parallel = match &self.model.parallel {
            Some(p) => {
                let load = crate::parallel::load_from_files(&t, transformer_files(path)?, path.to_path_buf());
                Some(Arc::new(p.with_weights(Arc::clone(&t), &load)?))
            }
            None => None,
        };
        let model = WanModel { transformer: t, parallel, ..self.model.share() };
        text_to_video_with(&model, self.policies.clone())
    }

    fn hash(&self, path: &Path) -> Result<String> {
        checkpoint_hash(&transformer_files(path)?)
    }
}
