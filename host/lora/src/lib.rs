//! LoRA files as people ship them, read without libtorch: a safetensors file in diffusers/PEFT,
//! original-Wan/ComfyUI or kohya naming becomes one patch per module, in diffusers' module names
//! (the model's own), with its low-rank pair, alpha and full-weight or bias differences. The
//! formats are this crate's; the module names of the original and kohya formats are the model
//! family's, which brings them as a [`KeyMap`]. The family checks a file against its module table
//! ([`LoraFile::check`]) and puts the tensors on its device; `fastvideo lora inspect` prints
//! [`LoraFile::summary`].
//!
//! Untrusted input: every shape, dtype and name is checked here, and an error names the key.

#![deny(missing_docs)]

mod key_map;
mod keys;
mod summary;

use std::collections::BTreeMap;
use std::path::Path;

use keys::Named;
use safetensors::{Dtype as StDtype, SafeTensors};

pub use key_map::{block, checkpoint_name, kohya_name, KeyMap};
pub use keys::{place, Format, Part, Place};
pub use summary::Summary;

/// A module a model lets adapters target: its name (diffusers' module path) and shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetModule {
    /// The module path in diffusers' names, e.g. `blocks.0.attn1.to_q`.
    pub name: String,
    /// Input features of the linear: the `down` matrix's second dimension.
    pub in_dim: i64,
    /// Output features of the linear: the `up` matrix's first dimension.
    pub out_dim: i64,
    /// Whether the linear has a bias, so a bias difference (`diff_b`) has somewhere to go.
    pub bias: bool,
}

/// A problem with a LoRA file, naming the key it is about when there is one.
#[derive(Debug, thiserror::Error)]
#[error("{}{message}", key.as_ref().map(|k| format!("`{k}`: ")).unwrap_or_default())]
pub struct LoraError {
    /// The offending key, when the problem is about one (none for the file as a whole).
    pub key: Option<String>,
    /// What is wrong, in words.
    pub message: String,
}

impl LoraError {
    fn at(key: &str, message: impl Into<String>) -> Self {
        Self { key: Some(key.to_string()), message: message.into() }
    }
    fn file(message: impl Into<String>) -> Self {
        Self { key: None, message: message.into() }
    }
}

/// Element types a LoRA tensor may have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    /// 32-bit float.
    F32,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    BF16,
}

impl Dtype {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::F16 | Dtype::BF16 => 2,
        }
    }
}

/// One tensor of the file: its key (for errors), element type, shape and little-endian bytes.
#[derive(Clone, Debug)]
pub struct TensorData {
    /// The key it was stored under, so errors about it can name it.
    pub key: String,
    /// Its element type.
    pub dtype: Dtype,
    /// Its shape, as the file gives it.
    pub shape: Vec<usize>,
    /// Its elements, little-endian, as stored in the file.
    pub data: Vec<u8>,
}

impl TensorData {
    /// The single value of a one-element tensor, as f64.
    fn scalar(&self) -> Option<f64> {
        if self.shape.iter().product::<usize>() != 1 {
            return None;
        }
        let b = &self.data;
        Some(match self.dtype {
            Dtype::F32 => f32::from_le_bytes(b[..4].try_into().ok()?) as f64,
            Dtype::F16 => f16_to_f64(u16::from_le_bytes([b[0], b[1]])),
            Dtype::BF16 => f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16) as f64,
        })
    }

    /// Part `i` of `n` equal parts along the first dimension (module `fused`'s share for one of
    /// the modules it fuses).
    fn rows(&self, i: usize, n: usize, fused: &str) -> Result<Self, LoraError> {
        let Some(&len) = self.shape.first().filter(|&&l| l > 0 && l % n == 0) else {
            return Err(LoraError::at(
                &self.key,
                format!("shape {:?} does not split into the {n} equal parts `{fused}` fuses", self.shape),
            ));
        };
        let row_bytes = self.data.len() / len;
        let part = len / n;
        let mut shape = self.shape.clone();
        shape[0] = part;
        let data = self.data[i * part * row_bytes..(i + 1) * part * row_bytes].to_vec();
        Ok(Self { key: self.key.clone(), dtype: self.dtype, shape, data })
    }
}

fn f16_to_f64(h: u16) -> f64 {
    let sign = if h >> 15 == 1 { -1.0 } else { 1.0 };
    let exp = ((h >> 10) & 0x1f) as i32;
    let frac = (h & 0x3ff) as f64;
    sign * match exp {
        0 => frac * 2f64.powi(-24),
        31 if frac == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        e => (1.0 + frac / 1024.0) * 2f64.powi(e - 15),
    }
}

/// Everything a file holds for one module.
#[derive(Clone, Debug, Default)]
pub struct ModulePatch {
    /// `[rank, in]`.
    pub down: Option<TensorData>,
    /// `[out, rank]`.
    pub up: Option<TensorData>,
    /// The file's `alpha` for the pair, when it has one (see [`scale`](Self::scale)).
    pub alpha: Option<f64>,
    /// `lora_alpha / r` from a diffusers file's `lora_adapter_metadata`, when it has one.
    pub metadata_scale: Option<f64>,
    /// `[out, in]`.
    pub diff: Option<TensorData>,
    /// `[out]`.
    pub diff_b: Option<TensorData>,
}

impl ModulePatch {
    /// The low-rank pair's rank (the `down` matrix's first dimension), if the file has the pair.
    pub fn rank(&self) -> Option<usize> {
        self.down.as_ref().map(|d| d.shape[0])
    }

    /// What the low-rank pair is multiplied by before the request's strength: `alpha / rank`
    /// when the file gives an alpha, the metadata's `lora_alpha / r` for diffusers files that
    /// carry it, else 1 (diffusers' rule: no alpha means alpha = rank).
    pub fn scale(&self) -> f64 {
        match (self.alpha, self.rank(), self.metadata_scale) {
            (Some(a), Some(r), _) if r > 0 => a / r as f64,
            (_, _, Some(s)) => s,
            _ => 1.0,
        }
    }
}

/// A parsed LoRA file.
#[derive(Clone, Debug)]
pub struct LoraFile {
    /// How the file names its modules, as detected from its keys.
    pub format: Format,
    /// By module (diffusers names).
    pub modules: BTreeMap<String, ModulePatch>,
    /// The text encoder's, by module (transformers' names), if the file carries any.
    pub text: BTreeMap<String, ModulePatch>,
    /// Keys for modules that are not linears (norm or modulation differences), left out as
    /// diffusers leaves them out.
    pub ignored: Vec<String>,
    /// The file's size in bytes.
    pub file_bytes: u64,
}

/// Files larger than this are refused before they are read (a full-weight diff of a 14B model
/// in bf16 is 28 GB; adapters are megabytes to a few GB).
pub const MAX_FILE_BYTES: u64 = 32 << 30;

impl LoraFile {
    /// Reads and parses the file at `path`, a family's names placed by `map`.
    pub fn read(path: &Path, map: &dyn KeyMap) -> Result<Self, LoraError> {
        let meta = std::fs::metadata(path).map_err(|e| LoraError::file(format!("{}: {e}", path.display())))?;
        if meta.len() > MAX_FILE_BYTES {
            return Err(LoraError::file(format!(
                "{}: {} bytes, more than the {} a LoRA file may have",
                path.display(),
                meta.len(),
                MAX_FILE_BYTES
            )));
        }
        let bytes = std::fs::read(path).map_err(|e| LoraError::file(format!("{}: {e}", path.display())))?;
        Self::parse(&bytes, map)
    }

    /// Parses a safetensors LoRA file's bytes, a family's names placed by `map` (diffusers names
    /// are the model's own and need no map).
    pub fn parse(bytes: &[u8], map: &dyn KeyMap) -> Result<Self, LoraError> {
        let Opened { st, names, format, metadata, text_metadata } = Opened::of(bytes)?;
        let mut modules: BTreeMap<String, ModulePatch> = BTreeMap::new();
        let mut text: BTreeMap<String, ModulePatch> = BTreeMap::new();
        let mut ignored = Vec::new();
        for key in &names {
            let place = keys::place(map, format, key).map_err(|m| LoraError::at(key, m))?;
            let (module, part, into) = match place {
                Place::Module(m, p) => (m, p, &mut modules),
                Place::Text(m, p) => (m, p, &mut text),
                Place::Ignored => {
                    ignored.push(key.clone());
                    continue;
                }
                Place::KohyaText => return Err(LoraError::at(key, KOHYA_TEXT)),
            };
            let t = tensor(&st, key)?;
            let patch = into.entry(module).or_default();
            let slot = match part {
                Part::Down => &mut patch.down,
                Part::Up => &mut patch.up,
                Part::Diff => &mut patch.diff,
                Part::DiffB => &mut patch.diff_b,
                Part::Alpha => {
                    if patch.alpha.replace(alpha(&t)?).is_some() {
                        return Err(LoraError::at(key, "a second alpha for the same module"));
                    }
                    continue;
                }
            };
            if slot.replace(t).is_some() {
                return Err(LoraError::at(key, "a second tensor for the same part of the same module"));
            }
        }
        split_fused(&mut modules, map)?;
        for (patches, meta) in [(&mut modules, &metadata), (&mut text, &text_metadata)] {
            for (name, patch) in patches.iter_mut() {
                check_patch(patch)?;
                if let Some(m) = meta {
                    patch.metadata_scale = Some(m.scale(name));
                }
            }
        }
        if modules.is_empty() && text.is_empty() {
            return Err(LoraError::file(format!(
                "no module to adapt: all {} tensors are norm or modulation differences",
                ignored.len()
            )));
        }
        Ok(Self { format, modules, text, ignored, file_bytes: bytes.len() as u64 })
    }

    /// What of a file can be checked without a family's names (a deploy's `[[adapters]]` before
    /// the model is known): a readable safetensors file whose keys are a LoRA format's, with
    /// readable low-rank tensors and alphas. Whether its names place is [`parse`](Self::parse)'s,
    /// with the model's [`KeyMap`]. A file refused here is refused by `parse` with any map, so the
    /// early check never stops a file that a model would take.
    pub fn check_format(bytes: &[u8]) -> Result<Format, LoraError> {
        let Opened { st, names, format, .. } = Opened::of(bytes)?;
        for key in &names {
            let part = match keys::named(format, key).map_err(|m| LoraError::at(key, m))? {
                Named::KohyaText => return Err(LoraError::at(key, KOHYA_TEXT)),
                Named::Model(_, p) | Named::Text(_, p) | Named::Original(_, p) | Named::Kohya(_, p) => p,
            };
            // A difference may be a non-linear's that a family's map leaves out unread.
            match part {
                Part::Diff | Part::DiffB => {}
                Part::Alpha => {
                    alpha(&tensor(&st, key)?)?;
                }
                Part::Down | Part::Up => {
                    tensor(&st, key)?;
                }
            }
        }
        Ok(format)
    }

    /// Checks every patch against `modules` (a model's module table): each must name one of
    /// them, with shapes that fit, before any tensor goes to a device.
    pub fn check(&self, modules: &[TargetModule]) -> Result<(), LoraError> {
        check_map(&self.modules, modules)
    }

    /// Bytes of every tensor the file's patches hold (transformer and text encoder).
    pub fn tensor_bytes(&self) -> u64 {
        let patches = self.modules.values().chain(self.text.values());
        patches.flat_map(|p| [&p.down, &p.up, &p.diff, &p.diff_b]).flatten().map(|t| t.data.len() as u64).sum()
    }

    /// [`check`](Self::check) for the text encoder's patches against its modules.
    pub fn check_text(&self, modules: &[TargetModule]) -> Result<(), LoraError> {
        check_map(&self.text, modules)
    }

    /// What `fastvideo lora inspect` prints.
    pub fn summary(&self) -> Summary {
        Summary::of(self)
    }
}

/// Replaces each patch of a fused module ([`KeyMap::split`]) by one per part: the down matrix and
/// alpha shared, the up matrix's, difference's and bias difference's rows split equally.
fn split_fused(modules: &mut BTreeMap<String, ModulePatch>, map: &dyn KeyMap) -> Result<(), LoraError> {
    let fused: Vec<(String, Vec<String>)> =
        modules.keys().filter_map(|m| map.split(m).map(|parts| (m.clone(), parts))).collect();
    for (name, parts) in fused {
        let Some(patch) = modules.remove(&name) else { continue };
        let n = parts.len();
        for (i, part) in parts.into_iter().enumerate() {
            let rows = |t: &Option<TensorData>| t.as_ref().map(|t| t.rows(i, n, &name)).transpose();
            let piece = ModulePatch {
                down: patch.down.clone(),
                up: rows(&patch.up)?,
                alpha: patch.alpha,
                metadata_scale: patch.metadata_scale,
                diff: rows(&patch.diff)?,
                diff_b: rows(&patch.diff_b)?,
            };
            if modules.insert(part.clone(), piece).is_some() {
                let key = patch.up.as_ref().or(patch.diff.as_ref()).map_or(name.as_str(), |t| t.key.as_str());
                return Err(LoraError::at(key, format!("`{part}` is given both on its own and fused in `{name}`")));
            }
        }
    }
    Ok(())
}

/// Every patch of `map` names one of `modules`, with shapes that fit.
fn check_map(map: &BTreeMap<String, ModulePatch>, modules: &[TargetModule]) -> Result<(), LoraError> {
    let table: BTreeMap<&str, &TargetModule> = modules.iter().map(|m| (m.name.as_str(), m)).collect();
    for (name, p) in map {
        let first = p.down.as_ref().or(p.up.as_ref()).or(p.diff.as_ref()).or(p.diff_b.as_ref());
        let key = first.map(|t| t.key.as_str()).unwrap_or(name);
        let Some(m) = table.get(name.as_str()) else {
            return Err(LoraError::at(key, format!("module `{name}` is not a linear module of this model")));
        };
        let (out, inp) = (m.out_dim as usize, m.in_dim as usize);
        if let Some(d) = &p.down {
            if d.shape[1] != inp {
                return Err(LoraError::at(
                    &d.key,
                    format!("shape {:?} takes {} inputs; `{name}` has {inp}", d.shape, d.shape[1]),
                ));
            }
        }
        if let Some(u) = &p.up {
            if u.shape[0] != out {
                return Err(LoraError::at(
                    &u.key,
                    format!("shape {:?} makes {} outputs; `{name}` has {out}", u.shape, u.shape[0]),
                ));
            }
        }
        if let Some(d) = &p.diff {
            if d.shape != [out, inp] {
                return Err(LoraError::at(&d.key, format!("shape {:?}; `{name}` is [{out}, {inp}]", d.shape)));
            }
        }
        if let Some(b) = &p.diff_b {
            if b.shape != [out] {
                return Err(LoraError::at(&b.key, format!("shape {:?}; `{name}` has {out} outputs", b.shape)));
            }
            if !m.bias {
                return Err(LoraError::at(&b.key, format!("a bias difference, but `{name}` has no bias")));
            }
        }
    }
    Ok(())
}

const KOHYA_TEXT: &str =
    "a kohya text-encoder key; give text-encoder adapters in diffusers' names (text_encoder.encoder.block.…)";

/// A file's safetensors view, its keys in order, its format and (diffusers) its PEFT configs.
struct Opened<'a> {
    st: SafeTensors<'a>,
    names: Vec<String>,
    format: Format,
    metadata: Option<AdapterMetadata>,
    text_metadata: Option<AdapterMetadata>,
}

impl<'a> Opened<'a> {
    fn of(bytes: &'a [u8]) -> Result<Self, LoraError> {
        let st = SafeTensors::deserialize(bytes)
            .map_err(|e| LoraError::file(format!("not a readable safetensors file ({e})")))?;
        let (_, header) = SafeTensors::read_metadata(bytes)
            .map_err(|e| LoraError::file(format!("not a readable safetensors file ({e})")))?;
        let mut names: Vec<String> = st.names().into_iter().map(str::to_string).collect();
        names.sort();
        if names.is_empty() {
            return Err(LoraError::file("the file holds no tensors"));
        }
        let format = Format::detect(names.iter().map(String::as_str));
        let (metadata, text_metadata) = match format {
            Format::Diffusers => (
                AdapterMetadata::of(header.metadata().as_ref(), "transformer")?,
                AdapterMetadata::of(header.metadata().as_ref(), "text_encoder")?,
            ),
            _ => (None, None),
        };
        Ok(Self { st, names, format, metadata, text_metadata })
    }
}

/// An alpha tensor's value: one finite positive number.
fn alpha(t: &TensorData) -> Result<f64, LoraError> {
    t.scalar()
        .filter(|a| a.is_finite() && *a > 0.0)
        .ok_or_else(|| LoraError::at(&t.key, "alpha must be one finite positive number"))
}

/// A tensor of the file, with a dtype and rank LoRA tensors can have.
fn tensor(st: &SafeTensors, key: &str) -> Result<TensorData, LoraError> {
    let view = st.tensor(key).map_err(|e| LoraError::at(key, e.to_string()))?;
    let dtype = match view.dtype() {
        StDtype::F32 => Dtype::F32,
        StDtype::F16 => Dtype::F16,
        StDtype::BF16 => Dtype::BF16,
        other => return Err(LoraError::at(key, format!("dtype {other:?}; LoRA tensors are F32, F16 or BF16"))),
    };
    let shape = view.shape().to_vec();
    let n: Option<usize> = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    if n.and_then(|n| n.checked_mul(dtype.size())) != Some(view.data().len()) {
        return Err(LoraError::at(key, format!("{} bytes do not hold shape {shape:?}", view.data().len())));
    }
    Ok(TensorData { key: key.to_string(), dtype, shape, data: view.data().to_vec() })
}

/// Shapes inside one module's patch agree with each other.
fn check_patch(p: &ModulePatch) -> Result<(), LoraError> {
    match (&p.down, &p.up) {
        (Some(d), Some(u)) => {
            for t in [d, u] {
                if t.shape.len() != 2 {
                    let what =
                        if t.shape.len() > 2 { "a convolution LoRA, which is not supported" } else { "not a matrix" };
                    return Err(LoraError::at(&t.key, format!("shape {:?}: {what}", t.shape)));
                }
            }
            if d.shape[0] == 0 || u.shape[1] != d.shape[0] {
                return Err(LoraError::at(
                    &u.key,
                    format!("shape {:?} does not fit the rank {} of {:?}", u.shape, d.shape[0], d.shape),
                ));
            }
        }
        (Some(t), None) | (None, Some(t)) => {
            return Err(LoraError::at(&t.key, "half of a low-rank pair: the file has no matching up/down tensor"))
        }
        (None, None) => {
            if p.alpha.is_some() && p.diff.is_none() && p.diff_b.is_none() {
                return Err(LoraError::file("an alpha for a module with no LoRA tensors"));
            }
        }
    }
    if let Some(d) = &p.diff {
        if d.shape.len() != 2 {
            return Err(LoraError::at(&d.key, format!("shape {:?}: a weight difference must be a matrix", d.shape)));
        }
    }
    if let Some(b) = &p.diff_b {
        if b.shape.len() != 1 {
            return Err(LoraError::at(&b.key, format!("shape {:?}: a bias difference must be a vector", b.shape)));
        }
    }
    Ok(())
}

/// diffusers' `lora_adapter_metadata` header entry: the PEFT config the file was saved with.
struct AdapterMetadata {
    r: f64,
    alpha: f64,
    rank_pattern: Vec<(String, f64)>,
    alpha_pattern: Vec<(String, f64)>,
}

impl AdapterMetadata {
    /// The config saved for `component` (`transformer`, `text_encoder`): its prefixed keys, or
    /// for the transformer unprefixed ones.
    fn of(
        header: Option<&std::collections::HashMap<String, String>>,
        component: &str,
    ) -> Result<Option<Self>, LoraError> {
        let Some(text) = header.and_then(|h| h.get("lora_adapter_metadata")) else { return Ok(None) };
        let bad = |m: &str| LoraError::at("__metadata__.lora_adapter_metadata", m.to_string());
        let json: serde_json::Value = serde_json::from_str(text).map_err(|_| bad("not valid JSON"))?;
        let plain = component == "transformer";
        let get = |k: &str| json.get(format!("{component}.{k}")).or_else(|| if plain { json.get(k) } else { None });
        let num = |k: &str, default: f64| -> Result<f64, LoraError> {
            match get(k) {
                None | Some(serde_json::Value::Null) => Ok(default),
                Some(v) => v
                    .as_f64()
                    .filter(|x| x.is_finite() && *x > 0.0)
                    .ok_or_else(|| bad(&format!("`{k}` must be a positive number"))),
            }
        };
        let pattern = |k: &str| -> Result<Vec<(String, f64)>, LoraError> {
            let Some(map) = get(k).and_then(|v| v.as_object()) else { return Ok(Vec::new()) };
            map.iter()
                .map(|(p, v)| {
                    let x = v.as_f64().filter(|x| x.is_finite() && *x > 0.0);
                    // PEFT matches a pattern as a regex anchored at the end: its `^` and `$`
                    // anchors add nothing to the literal names matched here.
                    x.map(|x| (p.trim_start_matches('^').trim_end_matches('$').to_string(), x))
                        .ok_or_else(|| bad(&format!("`{k}.{p}` must be a positive number")))
                })
                .collect()
        };
        // PEFT's LoraConfig defaults: r = 8, lora_alpha = 8.
        Ok(Some(Self {
            r: num("r", 8.0)?,
            alpha: num("lora_alpha", 8.0)?,
            rank_pattern: pattern("rank_pattern")?,
            alpha_pattern: pattern("alpha_pattern")?,
        }))
    }

    /// `lora_alpha / r` for `module`, with PEFT's pattern rule: a pattern matches the whole name
    /// or its tail after a dot.
    fn scale(&self, module: &str) -> f64 {
        let find = |pats: &[(String, f64)], default: f64| {
            pats.iter().find(|(p, _)| module == p || module.ends_with(&format!(".{p}"))).map_or(default, |(_, x)| *x)
        };
        find(&self.alpha_pattern, self.alpha) / find(&self.rank_pattern, self.r)
    }
}
