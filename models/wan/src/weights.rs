//! Checkpoint tensors by name, the candle way: `w.pp("blocks").pp(0).get("attn1.to_q.weight")`.
//! Module paths equal diffusers checkpoint keys, so no renaming table is needed, and every
//! lookup checks the shape so a corrupt or mismatched file fails with the key and both shapes.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use anyhow::{bail, Context, Result};
use tch::{Device, Kind, Tensor};

struct Store {
    tensors: HashMap<String, Tensor>,
    used: RefCell<BTreeSet<String>>,
    source: PathBuf,
}

/// A view of one component's tensors under a key prefix.
#[derive(Clone)]
pub struct Weights {
    store: Rc<Store>,
    prefix: String,
    device: Device,
    kind: Kind,
}

impl Weights {
    /// Loads `dir/<stem>.safetensors`, or the shards listed in `dir/<stem>.safetensors.index.json`.
    pub fn from_dir(dir: &Path, stem: &str, device: Device, kind: Kind) -> Result<Self> {
        let single = dir.join(format!("{stem}.safetensors"));
        let index = dir.join(format!("{stem}.safetensors.index.json"));
        let files = if single.exists() {
            vec![single]
        } else if index.exists() {
            shard_files(&index)?
        } else {
            bail!("{}: neither {stem}.safetensors nor {stem}.safetensors.index.json exists", dir.display());
        };
        let mut tensors = HashMap::new();
        for f in &files {
            let list = Tensor::read_safetensors(f)
                .map_err(|e| anyhow::anyhow!("{}: not a readable safetensors file ({e})", f.display()))?;
            tensors.extend(list);
        }
        Ok(Self::from_tensors(tensors, dir.to_path_buf(), device, kind))
    }

    pub fn from_tensors(tensors: HashMap<String, Tensor>, source: PathBuf, device: Device, kind: Kind) -> Self {
        let store = Store { tensors, used: RefCell::new(BTreeSet::new()), source };
        Self { store: Rc::new(store), prefix: String::new(), device, kind }
    }

    /// A sub-view: `pp("blocks").pp(3)` reads `blocks.3.*`.
    pub fn pp(&self, name: impl std::fmt::Display) -> Self {
        let prefix = if self.prefix.is_empty() { name.to_string() } else { format!("{}.{name}", self.prefix) };
        Self { prefix, ..self.clone() }
    }

    pub fn device(&self) -> Device {
        self.device
    }

    fn key(&self, name: &str) -> String {
        if self.prefix.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.prefix)
        }
    }

    pub fn contains(&self, name: &str) -> bool {
        self.store.tensors.contains_key(&self.key(name))
    }

    /// The tensor `name` with exactly `shape`, on the target device and dtype.
    pub fn get(&self, name: &str, shape: &[i64]) -> Result<Tensor> {
        let key = self.key(name);
        let Some(t) = self.store.tensors.get(&key) else {
            bail!("{}: missing tensor `{key}` (expected shape {shape:?})", self.store.source.display());
        };
        if t.size() != shape {
            bail!(
                "{}: tensor `{key}` has shape {:?}, the config implies {shape:?}",
                self.store.source.display(),
                t.size()
            );
        }
        self.store.used.borrow_mut().insert(key);
        Ok(t.to_device(self.device).to_kind(self.kind))
    }

    /// Names of tensors nothing asked for (a config/checkpoint mismatch worth a warning).
    pub fn unused(&self) -> Vec<String> {
        let used = self.store.used.borrow();
        let mut v: Vec<String> = self.store.tensors.keys().filter(|k| !used.contains(*k)).cloned().collect();
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

fn shard_files(index: &Path) -> Result<Vec<PathBuf>> {
    let text = std::fs::read_to_string(index).with_context(|| format!("reading {}", index.display()))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not valid JSON", index.display()))?;
    let Some(map) = json.get("weight_map").and_then(|m| m.as_object()) else {
        bail!("{}: no `weight_map` object", index.display());
    };
    let dir = index.parent().unwrap_or(Path::new("."));
    let files: BTreeSet<&str> = map.values().filter_map(|v| v.as_str()).collect();
    let files: Vec<PathBuf> = files.into_iter().map(|f| dir.join(f)).collect();
    for f in &files {
        if !f.exists() {
            bail!("{}: shard {} listed in the index does not exist", index.display(), f.display());
        }
    }
    Ok(files)
}
