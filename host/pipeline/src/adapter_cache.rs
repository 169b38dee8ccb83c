//! The adapters a server may run: the deploy's (or a CLI run's) files by name, prepared for the
//! model on first use and kept under a byte budget, least recently used first out. Requests name
//! adapters; admission checks the names here and gets the prepared set, loading what is missing
//! off the executor's thread.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use fastvideo_lora::{KeyMap, LoraFile, TargetModule};
use fastvideo_request::{LoraUse, RequestError};

use crate::{AdapterSet, PreparedAdapter};

/// What a model lets adapters do: its module table, preparing a file for it, and merging a set
/// into its weights (between forwards only).
pub trait AdapterTarget: Send + Sync {
    /// The modules adapters may target.
    fn modules(&self) -> &[TargetModule];
    /// The model family's names in the original and kohya formats, which files are parsed with.
    fn key_map(&self) -> &dyn KeyMap;
    /// Whether `file` fits the model (its transformer's modules; its text encoder's, when the
    /// model takes text-encoder adapters). By default text-encoder keys are refused.
    fn check(&self, file: &LoraFile) -> Result<(), fastvideo_lora::LoraError> {
        if let Some(k) = file.text.keys().next() {
            return Err(fastvideo_lora::LoraError {
                key: Some(format!("text_encoder.{k}")),
                message: "this model takes no text-encoder adapters".into(),
            });
        }
        file.check(self.modules())
    }
    /// `file` on the model's device and dtype, checked against [`modules`](Self::modules).
    fn prepare(&self, file: &LoraFile, name: &str, hash: &str) -> Result<PreparedAdapter>;
    /// Merges `set` into the weights (after restoring them from any other merged set).
    fn merge(&self, set: &AdapterSet) -> Result<()>;
    /// Restores the original weights if a set is merged.
    fn unmerge(&self);
    /// The merged set's key, if any.
    fn merged(&self) -> Option<String>;
    /// Whether merging is possible now (not with weights that leave the device: offloaded
    /// experts); the unmerged path serves every set anyway.
    fn can_merge(&self) -> bool {
        true
    }
    /// Whether `set` can be merged at all: a set whose entries bind to one loop of a two-stage
    /// recipe (one model, two weight sets in turn) runs unmerged.
    fn merges(&self, _set: &AdapterSet) -> bool {
        true
    }
}

/// One adapter a server may run.
#[derive(Debug, Clone, PartialEq)]
pub struct AdapterSource {
    /// What requests call it (`lora[i].name`).
    pub name: String,
    /// The safetensors file.
    pub path: PathBuf,
    /// Hex blake3 of the file: checked when the cache is made and on every load.
    pub blake3: String,
    /// Strength when a request gives none.
    pub default_scale: f64,
}

impl AdapterSource {
    /// Whether a request's `lora[i].name` names this adapter: by its name, or as ComfyUI's
    /// loaders do, by its file's name or stem (a folder before it ignored).
    pub fn answers_to(&self, name: &str) -> bool {
        if name == self.name {
            return true;
        }
        let base = name.rsplit(['/', '\\']).next().unwrap_or(name);
        let file = self.path.file_name().and_then(|f| f.to_str());
        let stem = self.path.file_stem().and_then(|f| f.to_str());
        file == Some(base) || stem == Some(base)
    }
}

/// What the cache did, for metrics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AdapterEvent {
    /// Found prepared.
    Hit,
    /// Read, checked and prepared.
    Load {
        /// Device bytes of its tensors.
        bytes: u64,
        /// Reading, checking and preparing it.
        seconds: f64,
    },
    /// Dropped from the cache to stay under the budget (requests running with it keep it).
    Evict {
        /// Device bytes it held.
        bytes: u64,
    },
    /// Prepared again from the parsed file kept in host memory (no disk read, no hash).
    HostHit,
}

/// A metrics callback.
type Observer = Box<dyn Fn(AdapterEvent) + Send + Sync>;

/// Adapters by name under a byte budget (device), with their parsed files kept in host memory
/// under twice that; see the module docs.
pub struct AdapterCache {
    sources: BTreeMap<String, AdapterSource>,
    target: Arc<dyn AdapterTarget>,
    budget: u64,
    max_per_request: usize,
    state: Mutex<Resident>,
    /// Parsed files in host memory, least recently used out past `host_budget` bytes: a device
    /// eviction costs a host-to-device copy when the adapter comes back, not a disk read.
    host: Mutex<HostFiles>,
    host_budget: u64,
    observer: Mutex<Option<Observer>>,
}

#[derive(Default)]
struct HostFiles {
    /// By name: the file, its tensor bytes, when last used.
    files: HashMap<String, (Arc<LoraFile>, u64, u64)>,
    tick: u64,
    bytes: u64,
}

impl HostFiles {
    fn get(&mut self, name: &str) -> Option<Arc<LoraFile>> {
        self.tick += 1;
        let tick = self.tick;
        self.files.get_mut(name).map(|(f, _, used)| {
            *used = tick;
            Arc::clone(f)
        })
    }

    fn put(&mut self, name: &str, file: Arc<LoraFile>, budget: u64) {
        self.tick += 1;
        let bytes = file.tensor_bytes();
        if let Some((_, old, _)) = self.files.insert(name.to_string(), (file, bytes, self.tick)) {
            self.bytes -= old;
        }
        self.bytes += bytes;
        while self.bytes > budget {
            let lru = self.files.iter().filter(|(n, _)| *n != name).min_by_key(|(_, (_, _, u))| *u);
            let Some(victim) = lru.map(|(n, _)| n.clone()) else { break };
            let (_, freed, _) = self.files.remove(&victim).expect("present");
            self.bytes -= freed;
        }
    }
}

#[derive(Default)]
struct Resident {
    entries: HashMap<String, (Arc<PreparedAdapter>, u64)>,
    tick: u64,
    bytes: u64,
}

/// Adapters one request may name unless the server says otherwise (`--max-loras-per-request`).
pub const DEFAULT_MAX_LORAS_PER_REQUEST: usize = 8;

impl AdapterCache {
    /// A cache for `target` over `sources`, holding at most `budget` device bytes. Every file is
    /// read, hashed and checked against the model's modules now, so a wrong file refuses to
    /// start (naming the adapter and the key) instead of failing a request later.
    pub fn new(
        target: Arc<dyn AdapterTarget>,
        sources: Vec<AdapterSource>,
        budget: u64,
        max_per_request: usize,
    ) -> Result<Self> {
        let mut cache = Self {
            sources: BTreeMap::new(),
            target,
            budget,
            max_per_request,
            state: Mutex::default(),
            host: Mutex::default(),
            host_budget: budget.saturating_mul(2),
            observer: Mutex::new(None),
        };
        for s in sources {
            cache.add(s)?;
        }
        Ok(cache)
    }

    /// Adds an adapter after checking its file (hash, format, fit to the model).
    pub fn add(&mut self, source: AdapterSource) -> Result<()> {
        if self.sources.contains_key(&source.name) {
            bail!("adapter `{}` is listed twice", source.name);
        }
        if !source.default_scale.is_finite() || source.default_scale.abs() > fastvideo_request::MAX_LORA_SCALE {
            bail!(
                "adapter `{}`: default_scale {} must be within ±{}",
                source.name,
                source.default_scale,
                fastvideo_request::MAX_LORA_SCALE
            );
        }
        let file = read_checked(&source, self.target.key_map())?;
        self.target.check(&file).with_context(|| {
            format!("adapter `{}` ({}) does not fit this model", source.name, source.path.display())
        })?;
        self.sources.insert(source.name.clone(), source);
        Ok(())
    }

    /// The adapter a request's name means: an adapter of that name, else the one whose file has
    /// that name (`stripes.safetensors`, as ComfyUI's `lora_name` gives it) or that stem.
    pub fn source(&self, name: &str) -> Option<&AdapterSource> {
        self.sources.get(name).or_else(|| self.sources.values().find(|s| s.answers_to(name)))
    }

    /// The adapters requests may name, with their default strengths.
    pub fn sources(&self) -> impl Iterator<Item = &AdapterSource> {
        self.sources.values()
    }

    /// The model the adapters are prepared for.
    pub fn target(&self) -> &Arc<dyn AdapterTarget> {
        &self.target
    }

    /// Calls `f` on every load, hit and eviction (metrics).
    pub fn observe(&self, f: Observer) {
        *self.observer.lock().unwrap_or_else(|e| e.into_inner()) = Some(f);
    }

    fn tell(&self, e: AdapterEvent) {
        if let Some(f) = &*self.observer.lock().unwrap_or_else(|e| e.into_inner()) {
            f(e);
        }
    }

    /// Admission's check of a request's adapters: at most `max_per_request`, each one this cache
    /// has. Errors name `lora` or `lora[i].name` and list the adapters there are.
    pub fn check(&self, lora: &[LoraUse]) -> Result<(), RequestError> {
        if lora.len() > self.max_per_request {
            return Err(RequestError::new(
                "lora",
                format!("{} adapters; this server runs at most {} per request", lora.len(), self.max_per_request),
            ));
        }
        for (i, u) in lora.iter().enumerate() {
            if self.source(&u.name).is_none() {
                let names: Vec<&str> = self.sources.keys().map(String::as_str).collect();
                let enabled = if names.is_empty() { "none".to_string() } else { names.join(", ") };
                return Err(RequestError::new(
                    format!("lora[{i}].name"),
                    format!("no adapter `{}` is enabled (enabled: {enabled})", u.name),
                ));
            }
        }
        Ok(())
    }

    /// Whether every adapter named is prepared already (so [`set_for`](Self::set_for) will not
    /// read any file).
    pub fn all_resident(&self, lora: &[LoraUse]) -> bool {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        lora.iter().all(|u| self.source(&u.name).is_some_and(|s| state.entries.contains_key(&s.name)))
    }

    /// The set a request runs with (`None` for none), loading adapters not yet prepared. Call
    /// [`check`](Self::check) first; this may block on reading files.
    pub fn set_for(&self, lora: &[LoraUse]) -> Result<Option<Arc<AdapterSet>>> {
        if lora.is_empty() {
            return Ok(None);
        }
        let mut entries = Vec::with_capacity(lora.len());
        for u in lora {
            let source = self.source(&u.name).with_context(|| format!("no adapter `{}`", u.name))?;
            let expert = u.expert.map(|e| e.index());
            entries.push((self.get(&source.name)?, u.scale.unwrap_or(source.default_scale), expert));
        }
        Ok(Some(Arc::new(AdapterSet::bound(entries))))
    }

    /// The prepared adapter `name`, from the cache or loaded now.
    pub fn get(&self, name: &str) -> Result<Arc<PreparedAdapter>> {
        {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            state.tick += 1;
            let tick = state.tick;
            if let Some((a, used)) = state.entries.get_mut(name) {
                *used = tick;
                let a = Arc::clone(a);
                drop(state);
                self.tell(AdapterEvent::Hit);
                return Ok(a);
            }
        }
        let source = self.sources.get(name).with_context(|| format!("no adapter `{name}`"))?;
        let t = Instant::now();
        let kept = self.host.lock().unwrap_or_else(|e| e.into_inner()).get(name);
        let file = match kept {
            Some(f) => {
                self.tell(AdapterEvent::HostHit);
                f
            }
            None => {
                let f = Arc::new(read_checked(source, self.target.key_map())?);
                self.host.lock().unwrap_or_else(|e| e.into_inner()).put(name, Arc::clone(&f), self.host_budget);
                f
            }
        };
        let prepared = Arc::new(self.target.prepare(&file, name, &source.blake3)?);
        if prepared.bytes > self.budget {
            bail!(
                "adapter `{name}` needs {} MiB on the device, more than the adapter cache's {} MiB (--adapter-cache)",
                prepared.bytes >> 20,
                self.budget >> 20
            );
        }
        self.tell(AdapterEvent::Load { bytes: prepared.bytes, seconds: t.elapsed().as_secs_f64() });
        let mut evicted = Vec::new();
        {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            state.tick += 1;
            let tick = state.tick;
            if let Some((old, _)) = state.entries.insert(name.to_string(), (Arc::clone(&prepared), tick)) {
                state.bytes -= old.bytes;
            }
            state.bytes += prepared.bytes;
            while state.bytes > self.budget {
                let Some(victim) = state
                    .entries
                    .iter()
                    .filter(|(n, _)| *n != name)
                    .min_by_key(|(_, (_, used))| *used)
                    .map(|(n, _)| n.clone())
                else {
                    break;
                };
                let (a, _) = state.entries.remove(&victim).expect("present");
                state.bytes -= a.bytes;
                evicted.push(a.bytes);
            }
        }
        for bytes in evicted {
            self.tell(AdapterEvent::Evict { bytes });
        }
        Ok(prepared)
    }

    /// Device bytes of the adapters the cache holds.
    pub fn resident_bytes(&self) -> u64 {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).bytes
    }
}

/// The source's file, read once, its hash checked, parsed with the model's `map`.
fn read_checked(source: &AdapterSource, map: &dyn KeyMap) -> Result<LoraFile> {
    let what = || format!("adapter `{}` ({})", source.name, source.path.display());
    let meta = std::fs::metadata(&source.path).with_context(what)?;
    if meta.len() > fastvideo_lora::MAX_FILE_BYTES {
        bail!("{}: {} bytes, more than a LoRA file may have", what(), meta.len());
    }
    let bytes = std::fs::read(&source.path).with_context(what)?;
    let actual = blake3::hash(&bytes).to_hex().to_string();
    if !actual.eq_ignore_ascii_case(source.blake3.trim()) {
        bail!("{}: blake3 is {actual}, the deploy pins {} (replaced file?)", what(), source.blake3.trim());
    }
    LoraFile::parse(&bytes, map).with_context(what)
}
