//! Checkpoint tensors by name, the candle way: `w.pp("blocks").pp(0).get("attn1.to_q.weight")`.
//! Module paths equal diffusers checkpoint keys, so no renaming table is needed, and every
//! lookup checks the shape so a corrupt or mismatched file fails with the key and both shapes.
//!
//! Files are memory-mapped and each tensor is materialised only when the model asks for it,
//! straight onto its device and into its dtype: loading a checkpoint never holds a second copy
//! of it in host memory, whatever dtype it was stored in (fp32, bf16, fp16) and however sharded.

mod files;
mod gguf;

pub use files::{checkpoint_files, index_shards};

pub use fastvideo_gguf::GgmlType;
pub use gguf::{GgmlWeight, LinearWeight};

use std::cell::{Cell, RefCell};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use anyhow::{bail, Context, Result};
use fastvideo_lora::TargetModule;
use memmap2::{Mmap, UncheckedAdvice};
use safetensors::{Dtype, SafeTensors};
use tch::{Device, Kind, Tensor};

/// Which linear weights (by key) an FP8 checkpoint keeps in FP8 ([`Weights::keep_fp8`]).
pub type KeepFp8 = Box<dyn Fn(&str) -> bool>;

/// Where one tensor's bytes sit.
struct Entry {
    file: usize,
    kind: Kind,
    shape: Vec<i64>,
    /// Byte range inside the mapped file.
    start: usize,
    end: usize,
    /// The key the file stores it under, where that is another layout's
    /// ([`Weights::from_file_renamed`]).
    stored: Option<String>,
    /// Set for a GGUF tensor in one of ggml's block formats (`kind` is then float32, what it
    /// decodes to).
    ggml: Option<GgmlType>,
}

impl Entry {
    /// Bytes its shape and type need.
    fn want_bytes(&self) -> u64 {
        let n = self.shape.iter().product::<i64>() as u64;
        match self.ggml {
            Some(ty) => ty.bytes_for(n).unwrap_or(u64::MAX),
            None => n * self.kind.elt_size_in_bytes() as u64,
        }
    }

    /// `key` as an error names it: with the file's own key beside it when that differs.
    fn spelled(&self, key: &str) -> String {
        match &self.stored {
            Some(s) => format!("`{s}` (the model's `{key}`)"),
            None => format!("`{key}`"),
        }
    }
}

enum Source {
    Mapped {
        maps: Vec<(PathBuf, Mmap)>,
        entries: HashMap<String, Entry>,
    },
    InMemory(HashMap<String, Tensor>),
    /// Made up on request (benchmarks of shapes whose checkpoints are not at hand); linear
    /// weights in `ggml`'s blocks when set.
    Random {
        seed: u64,
        ggml: Option<GgmlType>,
    },
}

struct Store {
    source: Source,
    used: RefCell<BTreeSet<String>>,
    origin: PathBuf,
    /// Every linear module built from this checkpoint, in build order (the index is its slot).
    linears: RefCell<Vec<TargetModule>>,
    /// While set ([`Weights::defer_linears`]): linear weights are checked and counted (bytes in
    /// the target dtype) but not read.
    deferred: Cell<Option<u64>>,
    /// Set by [`Weights::keep_fp8`]: e4m3 linear weights whose key it accepts stay FP8
    /// ([`Weights::get_linear`]).
    keep_fp8: RefCell<Option<KeepFp8>>,
    /// How many FP8 weights were kept so.
    kept_fp8: Cell<usize>,
}

impl Store {
    fn new(source: Source, origin: PathBuf) -> Self {
        Self {
            source,
            used: RefCell::default(),
            origin,
            linears: RefCell::default(),
            deferred: Cell::new(None),
            keep_fp8: RefCell::new(None),
            kept_fp8: Cell::new(0),
        }
    }
}

/// A view of one component's tensors under a key prefix.
#[derive(Clone)]
pub struct Weights {
    store: Rc<Store>,
    prefix: String,
    device: Device,
    kind: Kind,
}

fn kind_of(dtype: Dtype, file: &Path, key: &str) -> Result<Kind> {
    Ok(match dtype {
        Dtype::F32 => Kind::Float,
        Dtype::F16 => Kind::Half,
        Dtype::BF16 => Kind::BFloat16,
        Dtype::F64 => Kind::Double,
        Dtype::I64 => Kind::Int64,
        Dtype::I32 => Kind::Int,
        // FP8-stored checkpoints (scales beside the weights: `Weights::get_dequantized`).
        Dtype::F8_E4M3 => Kind::Float8e4m3fn,
        Dtype::F8_E5M2 => Kind::Float8e5m2,
        other => bail!("{}: tensor `{key}` has dtype {other:?}, which no model component uses", file.display()),
    })
}

/// Maps `file` and indexes its tensors.
fn map_file(file: &Path, index: usize, entries: &mut HashMap<String, Entry>) -> Result<Mmap> {
    let f = std::fs::File::open(file).with_context(|| format!("opening {}", file.display()))?;
    // SAFETY: the file is only read; a checkpoint rewritten while it is mapped is the one case
    // this cannot guard against, as with every mmap-based loader (safetensors, candle, vLLM).
    let map = unsafe { Mmap::map(&f) }.with_context(|| format!("mapping {}", file.display()))?;
    let (header, meta) = SafeTensors::read_metadata(&map)
        .map_err(|e| anyhow::anyhow!("{}: not a readable safetensors file ({e})", file.display()))?;
    let data_start = 8 + header;
    for (key, info) in meta.tensors() {
        let (s, e) = info.data_offsets;
        let shape: Vec<i64> = info.shape.iter().map(|&d| d as i64).collect();
        let entry = Entry {
            file: index,
            kind: kind_of(info.dtype, file, &key)?,
            shape,
            start: data_start + s,
            end: data_start + e,
            stored: None,
            ggml: None,
        };
        if entries.insert(key.clone(), entry).is_some() {
            bail!("{}: tensor `{key}` appears in more than one shard", file.display());
        }
    }
    Ok(map)
}

impl Weights {
    /// Maps `dir/<stem>.safetensors`, or the shards listed in `dir/<stem>.safetensors.index.json`.
    pub fn from_dir(dir: &Path, stem: &str, device: Device, kind: Kind) -> Result<Self> {
        let files = checkpoint_files(dir, stem)?;
        Self::from_files(&files, dir, device, kind)
    }

    /// Maps the given safetensors files as one checkpoint (`origin` names it in errors).
    pub fn from_files(files: &[PathBuf], origin: &Path, device: Device, kind: Kind) -> Result<Self> {
        let mut entries = HashMap::new();
        let mut maps = Vec::new();
        for (i, f) in files.iter().enumerate() {
            maps.push((f.clone(), map_file(f, i, &mut entries)?));
        }
        let store = Store::new(Source::Mapped { maps, entries }, origin.to_path_buf());
        Ok(Self { store: Rc::new(store), prefix: String::new(), device, kind })
    }

    /// Maps one safetensors or GGUF file (told by its first bytes) whose keys are another
    /// layout's (a single-file checkpoint in the original release's names): `rename` gets every
    /// key, sorted, and gives each one's name in the model (its error names the key). Errors
    /// about a tensor name the file's key too. A GGUF file's block-quantized linear weights stay
    /// quantized ([`get_linear`](Self::get_linear)); it is checked whole (every range, every
    /// block's scale) before anything is read.
    pub fn from_file_renamed(
        file: &Path,
        device: Device,
        kind: Kind,
        rename: &dyn Fn(&[String]) -> Result<Vec<String>>,
    ) -> Result<Self> {
        let mut raw = HashMap::new();
        let map = if gguf::is_gguf(file)? { gguf::map(file, &mut raw)? } else { map_file(file, 0, &mut raw)? };
        let mut keys: Vec<String> = raw.keys().cloned().collect();
        keys.sort();
        let names = rename(&keys)?;
        let mut entries: HashMap<String, Entry> = HashMap::new();
        for (key, name) in keys.into_iter().zip(names) {
            let mut e = raw.remove(&key).expect("listed");
            if let Some(other) = entries.get(&name) {
                let other = other.stored.as_deref().unwrap_or(&name);
                bail!("{}: tensors `{other}` and `{key}` are both the model's `{name}`", file.display());
            }
            e.stored = (key != name).then_some(key);
            entries.insert(name, e);
        }
        let store = Store::new(Source::Mapped { maps: vec![(file.to_path_buf(), map)], entries }, file.to_path_buf());
        Ok(Self { store: Rc::new(store), prefix: String::new(), device, kind })
    }

    /// The key the checkpoint stores the model's tensor `name` under (itself, unless the file
    /// is in another layout).
    pub fn stored_name(&self, name: &str) -> String {
        match &self.store.source {
            Source::Mapped { entries, .. } => entries.get(name).and_then(|e| e.stored.clone()),
            _ => None,
        }
        .unwrap_or_else(|| name.to_string())
    }

    /// Random weights for whatever the model asks for, the way freshly initialised layers look:
    /// matrices and convolutions `N(0, 1/fan_in)`, 1-D weights (norms) ones, biases zeros. The
    /// same `seed` gives the same tensors on every device of one kind (each is drawn from a
    /// generator seeded by the seed and the key).
    pub fn random(seed: u64, device: Device, kind: Kind) -> Self {
        let store =
            Store::new(Source::Random { seed, ggml: None }, PathBuf::from(format!("random weights (seed {seed})")));
        Self { store: Rc::new(store), prefix: String::new(), device, kind }
    }

    /// [`random`](Self::random), with linear weights as random ggml blocks of `ty` (scales of
    /// the size `random` draws): the memory and speed of a GGUF file of a shape whose file is
    /// not at hand.
    pub fn random_ggml(seed: u64, device: Device, kind: Kind, ty: GgmlType) -> Self {
        let origin = PathBuf::from(format!("random {ty} weights (seed {seed})"));
        let store = Store::new(Source::Random { seed, ggml: Some(ty) }, origin);
        Self { store: Rc::new(store), prefix: String::new(), device, kind }
    }

    /// Tensors already in memory (tests, converted checkpoints) as a checkpoint; `source` names it
    /// in errors.
    pub fn from_tensors(tensors: HashMap<String, Tensor>, source: PathBuf, device: Device, kind: Kind) -> Self {
        let store = Store::new(Source::InMemory(tensors), source);
        Self { store: Rc::new(store), prefix: String::new(), device, kind }
    }

    /// A sub-view: `pp("blocks").pp(3)` reads `blocks.3.*`.
    pub fn pp(&self, name: impl std::fmt::Display) -> Self {
        let prefix = if self.prefix.is_empty() { name.to_string() } else { format!("{}.{name}", self.prefix) };
        Self { prefix, ..self.clone() }
    }

    /// The same view, materialising tensors in `kind` instead (e.g. float32 for the modules the
    /// reference keeps in full precision whatever the model's dtype).
    pub fn with_kind(&self, kind: Kind) -> Self {
        Self { kind, ..self.clone() }
    }

    /// The same view, materialising tensors on `device` (a component's host-side parts).
    pub fn with_device(&self, device: Device) -> Self {
        Self { device, ..self.clone() }
    }

    /// Bytes the tensors under `prefix` (of this view) take once loaded: in the view's dtype,
    /// or as stored for GGUF blocks that stay quantized. `None` for random weights, whose
    /// tensors exist only when asked for.
    pub fn loaded_bytes_under(&self, prefix: &str) -> Option<u64> {
        let want = self.key(prefix);
        let elt = self.kind.elt_size_in_bytes() as u64;
        let numel = |shape: &[i64]| shape.iter().product::<i64>().max(0) as u64;
        match &self.store.source {
            Source::Mapped { entries, .. } => Some(
                entries
                    .iter()
                    .filter(|(k, _)| k.starts_with(&want))
                    .map(|(_, e)| match e.ggml {
                        Some(_) => e.want_bytes(),
                        None => numel(&e.shape) * elt,
                    })
                    .sum(),
            ),
            Source::InMemory(t) => {
                Some(t.iter().filter(|(k, _)| k.starts_with(&want)).map(|(_, t)| numel(&t.size()) * elt).sum())
            }
            Source::Random { .. } => None,
        }
    }

    /// The device tensors are materialised on.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The dtype tensors are materialised in.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    fn key(&self, name: &str) -> String {
        if self.prefix.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.prefix)
        }
    }

    /// Records the linear module at this view's path (`blocks.0.attn1.to_q`) and returns its
    /// slot: the index adapters address it by.
    pub fn register_linear(&self, in_dim: i64, out_dim: i64, bias: bool) -> usize {
        let mut linears = self.store.linears.borrow_mut();
        linears.push(TargetModule { name: self.prefix.clone(), in_dim, out_dim, bias });
        linears.len() - 1
    }

    /// The linear modules built from this checkpoint so far, by slot.
    pub fn linears(&self) -> Vec<TargetModule> {
        self.store.linears.borrow().clone()
    }

    /// Whether the checkpoint has `name` under this view (always, for random weights), for optional
    /// tensors such as biases.
    pub fn contains(&self, name: &str) -> bool {
        let key = self.key(name);
        match &self.store.source {
            Source::Mapped { entries, .. } => entries.contains_key(&key),
            Source::InMemory(t) => t.contains_key(&key),
            Source::Random { .. } => true,
        }
    }

    /// The dtype and shape `name` is stored with (`None` for random weights or a missing name).
    pub fn stored(&self, name: &str) -> Option<(Kind, Vec<i64>)> {
        let key = self.key(name);
        match &self.store.source {
            Source::Mapped { entries, .. } => entries.get(&key).map(|e| (e.kind, e.shape.clone())),
            Source::InMemory(t) => t.get(&key).map(|t| (t.kind(), t.size())),
            Source::Random { .. } => None,
        }
    }

    /// A linear's `[out, in]` weight, dequantized when the checkpoint stores it in FP8 with its
    /// scale beside it, as FP8 checkpoints publish them: `<module>.weight_scale` (NVIDIA
    /// ModelOpt, diffusers' quantized exports) or `<module>.scale_weight` (ComfyUI's scaled FP8),
    /// one scale for the tensor or one per output channel. A static `input_scale` is read and
    /// not used (activations are quantized per token at run time, `--fp8-linears`). Any other
    /// dtype is [`get`](Self::get).
    pub fn get_linear_weight(&self, shape: &[i64]) -> Result<Tensor> {
        if let Some(bytes) = self.store.deferred.get() {
            return self.defer("weight", shape, bytes);
        }
        let fp8 = matches!(self.stored("weight"), Some((Kind::Float8e4m3fn | Kind::Float8e5m2, _)));
        if !fp8 {
            return self.get("weight", shape);
        }
        let values = self.with_kind(Kind::Float).get("weight", shape)?;
        let scale = self.fp8_scale(shape[0])?;
        Ok((values * scale).to_kind(self.kind))
    }

    /// An FP8 weight's float32 scale as `[1, 1]` or `[out, 1]` (`weight_scale` or `scale_weight`
    /// beside it), checked finite; the static input scale (`input_scale`, ComfyUI's
    /// `scale_input`) is read and not used: activations are quantized per token at run time.
    fn fp8_scale(&self, out: i64) -> Result<Tensor> {
        let scale = match ["weight_scale", "scale_weight"].into_iter().find_map(|n| Some((n, self.stored(n)?.1))) {
            Some((name, s)) => {
                let n: i64 = s.iter().product();
                if n != 1 && n != out {
                    bail!(
                        "{}: `{}` has shape {s:?}; an FP8 weight's scale is one value or one per output channel ({out})",
                        self.store.origin.display(),
                        self.key(name)
                    );
                }
                let scale = self.with_kind(Kind::Float).get(name, &s)?.reshape([-1, 1]);
                if !bool::try_from(scale.isfinite().all()).unwrap_or(false) {
                    bail!(
                        "{}: tensor `{}` has a NaN or infinite scale",
                        self.store.origin.display(),
                        self.stored_name(&self.key(name))
                    );
                }
                scale
            }
            None => bail!(
                "{}: `{}` is stored in FP8 without a `weight_scale` or `scale_weight` beside it",
                self.store.origin.display(),
                self.key("weight")
            ),
        };
        for name in ["input_scale", "scale_input"] {
            if let Some((_, s)) = self.stored(name) {
                let _ = self.with_kind(Kind::Float).get(name, &s)?;
            }
        }
        Ok(scale)
    }

    /// From now on, linear weights ([`get_linear_weight`](Self::get_linear_weight)) are checked
    /// against the checkpoint but not read: each comes back as an empty tensor, to be filled by
    /// a later load of the same checkpoint. A model served lazily is built this way, so its
    /// largest tensors take neither time nor memory until it first runs.
    pub fn defer_linears(&self) {
        self.store.deferred.set(Some(self.store.deferred.get().unwrap_or(0)));
    }

    /// Bytes (in the target dtype) of the linear weights deferred so far.
    pub fn deferred_bytes(&self) -> u64 {
        self.store.deferred.get().unwrap_or(0)
    }

    /// A deferred linear weight: checked as a read would check it (present with `shape`, its
    /// bytes as long as that shape needs, an FP8 weight's scale beside it), counted, not read.
    fn defer(&self, name: &str, shape: &[i64], bytes: u64) -> Result<Tensor> {
        let key = self.key(name);
        let origin = self.store.origin.display();
        match self.stored(name) {
            Some((_, s)) if s != shape => {
                bail!("{origin}: tensor `{key}` has shape {s:?}, the config implies {shape:?}")
            }
            None if !matches!(self.store.source, Source::Random { .. }) => {
                bail!("{origin}: missing tensor `{key}` (expected shape {shape:?})")
            }
            Some((Kind::Float8e4m3fn | Kind::Float8e5m2, _)) => {
                let scale = ["weight_scale", "scale_weight"].into_iter().find_map(|n| self.stored(n));
                let n = scale.as_ref().map(|(_, s)| s.iter().product::<i64>());
                if n.is_none_or(|n| n != 1 && n != shape[0]) {
                    bail!("{origin}: `{key}` is stored in FP8 without a scale of one value or one per output channel");
                }
            }
            _ => {}
        }
        if let Source::Mapped { maps, entries } = &self.store.source {
            let e = &entries[&key];
            let want = e.want_bytes() as usize;
            if e.end - e.start != want {
                let path = maps[e.file].0.display();
                bail!("{path}: tensor `{key}` holds {} bytes, its shape and dtype need {want}", e.end - e.start);
            }
        }
        let mut used = self.store.used.borrow_mut();
        for n in [name, "weight_scale", "scale_weight", "input_scale", "scale_input"] {
            if n == name || self.contains(n) && !matches!(self.store.source, Source::Random { .. }) {
                used.insert(self.key(n));
            }
        }
        let n: i64 = shape.iter().product();
        self.store.deferred.set(Some(bytes + n as u64 * self.kind.elt_size_in_bytes() as u64));
        Ok(Tensor::empty([0], (self.kind, self.device)))
    }

    /// The tensor `name` with exactly `shape`, on the target device and dtype.
    pub fn get(&self, name: &str, shape: &[i64]) -> Result<Tensor> {
        let key = self.key(name);
        let origin = self.store.origin.display();
        let t = match &self.store.source {
            Source::InMemory(tensors) => {
                let Some(t) = tensors.get(&key) else {
                    bail!("{origin}: missing tensor `{key}` (expected shape {shape:?})");
                };
                if t.size() != shape {
                    bail!("{origin}: tensor `{key}` has shape {:?}, the config implies {shape:?}", t.size());
                }
                t.to_device(self.device).to_kind(self.kind)
            }
            Source::Random { seed, .. } => {
                let opts = (Kind::Float, self.device);
                let t = if shape.len() >= 2 {
                    let key_seed = u64::from_le_bytes(blake3::hash(key.as_bytes()).as_bytes()[..8].try_into().unwrap());
                    tch::manual_seed((seed ^ key_seed) as i64 & i64::MAX);
                    let fan_in: i64 = shape[1..].iter().product();
                    Tensor::randn(shape, opts) / (fan_in as f64).sqrt()
                } else if key.ends_with("bias") {
                    Tensor::zeros(shape, opts)
                } else {
                    Tensor::ones(shape, opts)
                };
                t.to_kind(self.kind)
            }
            Source::Mapped { maps, entries } => {
                let (bytes, e) = mapped(maps, entries, &origin, &key, shape)?;
                let t = self.materialise(bytes, e);
                forget_pages(&maps[e.file].1, e);
                t
            }
        };
        self.store.used.borrow_mut().insert(key);
        Ok(t)
    }

    /// Bytes of a mapped tensor → a tensor on the target device in the target dtype. For a GPU
    /// target the bytes go straight from the mapping to the device (no host copy), and the dtype
    /// conversion runs there.
    fn materialise(&self, bytes: &[u8], e: &Entry) -> Tensor {
        if let Some(ty) = e.ggml {
            return gguf::decode(ty, bytes, &e.shape).to_kind(self.kind).to_device(self.device);
        }
        let aligned = (bytes.as_ptr() as usize).is_multiple_of(e.kind.elt_size_in_bytes());
        if self.device != Device::Cpu && aligned && std::env::var_os("FASTVIDEO_LOAD_VIA_HOST").is_none() {
            let strides = contiguous_strides(&e.shape);
            // SAFETY: `bytes` is a live mapping of exactly shape × element size bytes (checked
            // by the caller), aligned for the element type; the borrowed tensor is consumed by
            // the synchronous host-to-device copy before this function returns.
            let host = unsafe { Tensor::from_blob(bytes.as_ptr(), &e.shape, &strides, e.kind, Device::Cpu) };
            return host.to_device(self.device).to_kind(self.kind);
        }
        Tensor::from_data_size(bytes, &e.shape, e.kind).to_kind(self.kind).to_device(self.device)
    }

    /// Names of tensors nothing asked for (a config/checkpoint mismatch worth a warning).
    pub fn unused(&self) -> Vec<String> {
        let used = self.store.used.borrow();
        let keys: Vec<&String> = match &self.store.source {
            Source::Mapped { entries, .. } => entries.keys().collect(),
            Source::InMemory(t) => t.keys().collect(),
            Source::Random { .. } => Vec::new(),
        };
        let mut v: Vec<String> = keys.into_iter().filter(|k| !used.contains(*k)).cloned().collect();
        v.sort();
        v
    }

    /// Logs tensors the model did not use.
    pub fn warn_unused(&self, component: &str) {
        let unused = self.unused();
        if !unused.is_empty() {
            tracing::warn!(component, count = unused.len(), first = %unused[0], "checkpoint tensors not used by the model");
        }
    }
}

/// The checked bytes of the mapped tensor `key`: present, of `shape`, its byte range as long
/// as its shape and type need.
fn mapped<'a>(
    maps: &'a [(PathBuf, Mmap)],
    entries: &'a HashMap<String, Entry>,
    origin: &impl std::fmt::Display,
    key: &str,
    shape: &[i64],
) -> Result<(&'a [u8], &'a Entry)> {
    let Some(e) = entries.get(key) else {
        bail!("{origin}: missing tensor `{key}` (expected shape {shape:?})");
    };
    if e.shape != shape {
        bail!("{origin}: tensor {} has shape {:?}, the config implies {shape:?}", e.spelled(key), e.shape);
    }
    let (path, map) = &maps[e.file];
    let bytes = &map[e.start..e.end];
    let want = e.want_bytes() as usize;
    if bytes.len() != want {
        bail!(
            "{}: tensor {} holds {} bytes, its shape and dtype need {want}",
            path.display(),
            e.spelled(key),
            bytes.len()
        );
    }
    Ok((bytes, e))
}

/// Drops a copied tensor's pages from this process's mapping, so a checkpoint never sits in our
/// resident memory (the page cache may keep them).
fn forget_pages(map: &Mmap, e: &Entry) {
    // SAFETY: the mapping is read-only and file-backed, so DONTNEED only forgets pages that a
    // later read faults back in from the file.
    let _ = unsafe { map.unchecked_advise_range(UncheckedAdvice::DontNeed, e.start, e.end - e.start) };
}

fn contiguous_strides(shape: &[i64]) -> Vec<i64> {
    let mut strides = vec![1i64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1].max(1);
    }
    strides
}
