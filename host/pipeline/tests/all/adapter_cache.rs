//! The adapter cache on a stand-in model: device LRU under its budget, the host copy that saves
//! a disk read after an eviction, names and file names, and admission's checks.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use fastvideo_lora::{KeyMap, LoraFile, TargetModule};
use fastvideo_pipeline::{AdapterCache, AdapterEvent, AdapterSet, AdapterSource, AdapterTarget, PreparedAdapter};
use fastvideo_request::LoraUse;

/// One 4x4 linear; every prepared adapter counts 100 device bytes.
struct Stand {
    modules: Vec<TargetModule>,
}

/// The stand-in's adapters come in diffusers' names only (its own): no other names place.
struct StandKeys;

impl KeyMap for StandKeys {
    fn family(&self) -> &str {
        "stand-in"
    }
    fn original(&self, _: &str) -> Option<String> {
        None
    }
    fn kohya(&self, _: &str) -> Option<String> {
        None
    }
    fn not_linear(&self, _: &str) -> bool {
        false
    }
}

impl AdapterTarget for Stand {
    fn modules(&self) -> &[TargetModule] {
        &self.modules
    }
    fn key_map(&self) -> &dyn KeyMap {
        &StandKeys
    }
    fn prepare(&self, file: &LoraFile, name: &str, hash: &str) -> anyhow::Result<PreparedAdapter> {
        file.check(&self.modules)?;
        Ok(PreparedAdapter { name: name.into(), hash: hash.into(), deltas: vec![None], text: Vec::new(), bytes: 100 })
    }
    fn merge(&self, _: &AdapterSet) -> anyhow::Result<()> {
        Ok(())
    }
    fn unmerge(&self) {}
    fn merged(&self) -> Option<String> {
        None
    }
}

fn write_lora(dir: &Path, name: &str) -> AdapterSource {
    let (a, b) = (vec![0u8; 2 * 4 * 4], vec![0u8; 4 * 2 * 4]);
    let views = vec![
        (
            "transformer.m.lora_A.weight".to_string(),
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![2, 4], &a).unwrap(),
        ),
        (
            "transformer.m.lora_B.weight".to_string(),
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![4, 2], &b).unwrap(),
        ),
    ];
    let bytes = safetensors::tensor::serialize(views, None).unwrap();
    let path: PathBuf = dir.join(format!("{name}.safetensors"));
    std::fs::write(&path, &bytes).unwrap();
    AdapterSource { name: name.into(), path, blake3: blake3::hash(&bytes).to_hex().to_string(), default_scale: 0.5 }
}

fn uses(names: &[&str]) -> Vec<LoraUse> {
    names.iter().map(|n| LoraUse { name: n.to_string(), scale: None, expert: None }).collect()
}

#[test]
fn the_cache_evicts_least_recently_used_and_keeps_host_copies() {
    let dir = tempfile::tempdir().unwrap();
    let stand =
        Arc::new(Stand { modules: vec![TargetModule { name: "m".into(), in_dim: 4, out_dim: 4, bias: false }] });
    let sources = ["a", "b", "c"].map(|n| write_lora(dir.path(), n)).to_vec();
    let cache = AdapterCache::new(stand, sources, 250, 2).unwrap();
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&events);
    cache.observe(Box::new(move |e| seen.lock().unwrap().push(e)));
    let kinds = |events: &Mutex<Vec<AdapterEvent>>| -> Vec<&'static str> {
        events
            .lock()
            .unwrap()
            .drain(..)
            .map(|e| match e {
                AdapterEvent::Hit => "hit",
                AdapterEvent::Load { .. } => "load",
                AdapterEvent::Evict { .. } => "evict",
                AdapterEvent::HostHit => "host",
            })
            .collect()
    };
    let set = cache.set_for(&uses(&["a", "b"])).unwrap().unwrap();
    assert_eq!(set.entries().iter().map(|(_, s)| *s).collect::<Vec<_>>(), [0.5, 0.5], "the deploy's default scale");
    assert_eq!(kinds(&events), ["load", "load"]);
    cache.get("a").unwrap(); // a is now the most recently used
    cache.get("c").unwrap(); // 300 > 250: b goes
    assert_eq!(kinds(&events), ["hit", "load", "evict"]);
    assert_eq!(cache.resident_bytes(), 200);
    assert!(cache.all_resident(&uses(&["a", "c"])) && !cache.all_resident(&uses(&["b"])));
    // b comes back from its host copy: no disk read (its file is gone).
    std::fs::remove_file(dir.path().join("b.safetensors")).unwrap();
    cache.get("b").unwrap();
    assert_eq!(kinds(&events), ["host", "load", "evict"]);
    // Names: by name, by file name (ComfyUI's lora_name), by stem; admission's checks.
    assert_eq!(cache.source("sub/c.safetensors").unwrap().name, "c");
    assert!(cache.check(&uses(&["a", "c.safetensors"])).is_ok());
    let e = cache.check(&uses(&["a", "b", "c"])).unwrap_err();
    assert_eq!(e.field, "lora");
    let e = cache.check(&uses(&["x"])).unwrap_err();
    assert_eq!(e.field, "lora[0].name");
    assert!(e.rule.contains("enabled: a, b, c"), "{e}");
}
