//! The ComfyUI API's state: the deploy's settings and translators, the translators' node
//! declarations, and the prompt queue.

use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use fastvideo_comfy::{Translators, WorkflowConfig};
use serde_json::{json, Value};

use super::queue;

/// Maps a `[workflows.models]` folder to the served model it is (none: not served).
pub type ServedFolder = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// What the ComfyUI API needs from the deploy and the process.
#[derive(Clone)]
pub struct ComfyConfig {
    /// The deploy's workflow translators.
    pub translators: Translators,
    /// The deploy's `[workflows.models]`.
    pub models: WorkflowConfig,
    /// The served model (its id) a `[workflows.models]` folder is, if it is one of them.
    pub serves: ServedFolder,
    /// Holds `output/` (what prompts write, what `/view` serves) and `input/` (uploads).
    pub root: PathBuf,
    /// The device for `/system_stats` (`cuda`, `cpu`), its name and memory in bytes.
    pub device: DeviceInfo,
}

/// One device as `/system_stats` lists it.
#[derive(Clone, Debug, Default)]
pub struct DeviceInfo {
    /// `cuda` or `cpu`.
    pub kind: String,
    /// E.g. `cuda:0 NVIDIA H200`.
    pub name: String,
    /// Device memory (0 on CPU).
    pub vram_total: u64,
    /// Free device memory when the server started.
    pub vram_free: u64,
}

/// The API's state.
pub struct Comfy {
    pub(super) cfg: ComfyConfig,
    /// The translators' declarations, model-file choices filled in.
    declared: Value,
    pub(super) queue: queue::Queue,
    pub(super) number: AtomicU64,
    /// Serializes picking output names.
    pub(super) writing: tokio::sync::Mutex<()>,
}

impl Comfy {
    /// The API over `cfg`.
    pub fn new(cfg: ComfyConfig) -> Arc<Self> {
        let declared = with_model_files(cfg.translators.object_info(), &cfg.models);
        Arc::new(Comfy {
            cfg,
            declared,
            queue: queue::Queue::default(),
            number: AtomicU64::new(0),
            writing: Default::default(),
        })
    }

    /// `/object_info` now: the declarations, with upload combos (`LoadImage`'s `image`,
    /// `LoadVideo`'s `file`) listing the pictures or videos now in the input folder, as
    /// ComfyUI lists its input directory.
    pub(super) fn object_info(&self) -> Value {
        let mut info = self.declared.clone();
        let input = self.cfg.root.join("input");
        for_each_combo(&mut info, |decl| {
            let exts: &[&str] = match (&decl[1]["image_upload"], &decl[1]["video_upload"]) {
                (Value::Bool(true), _) => &["png", "jpg", "jpeg", "webp"],
                (_, Value::Bool(true)) => &["mp4"],
                _ => return,
            };
            decl[1]["options"] = json!(input_files(&input, exts));
        });
        info
    }
}

/// Files directly in `dir` with one of `exts` (lowercase), sorted.
fn input_files(dir: &std::path::Path, exts: &[&str]) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.rsplit_once('.').is_some_and(|(_, ext)| exts.contains(&ext.to_ascii_lowercase().as_str())))
        .collect();
    names.sort();
    names
}

/// Calls `f` on every combo input declaration (`["COMBO", {...}]`) of every node.
fn for_each_combo(info: &mut Value, mut f: impl FnMut(&mut Value)) {
    for node in info.as_object_mut().into_iter().flat_map(|m| m.values_mut()) {
        for group in ["required", "optional"] {
            let Some(inputs) = node.pointer_mut(&format!("/input/{group}")).and_then(Value::as_object_mut) else {
                continue;
            };
            inputs.values_mut().filter(|d| d[0] == "COMBO").for_each(&mut f);
        }
    }
}

/// Translators declare model-file inputs (`unet_name`, `vae_name`, …) as combos without
/// choices, since the files are the deploy's; here they get the deploy's file names, as
/// ComfyUI lists its model folders, so clients that check values against `/object_info`
/// accept them.
fn with_model_files(info: &serde_json::Map<String, Value>, models: &WorkflowConfig) -> Value {
    let files: Vec<&String> = models.models.keys().collect();
    let mut info = Value::Object(info.clone());
    for_each_combo(&mut info, |decl| {
        let upload = decl[1]["image_upload"] == true || decl[1]["video_upload"] == true;
        if !upload && decl[1]["options"].as_array().is_some_and(Vec::is_empty) {
            decl[1]["options"] = json!(files);
        }
    });
    info
}
