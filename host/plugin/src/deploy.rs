//! The deploy config (TOML): which plugins run, pinned by blake3, with which grants and default
//! parameters. Anything wrong refuses to start with a message naming the plugin.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use fastvideo_request::ResolvedRequest;
use serde::Deserialize;

use fastvideo_pipeline::AdapterSource;

use crate::manifest::{blake3_hex, PluginKind};
use crate::runtime::{Limits, LoadedPlugin, PluginRuntime};
use crate::PluginError;

/// A parsed deploy file. Unknown keys are refused, so a typo fails to parse instead of being
/// ignored.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeployConfig {
    /// The `[limits]` table, shared by every plugin; keys left out keep [`Limits::default`].
    #[serde(default)]
    pub limits: Limits,
    /// The `[[plugins]]` tables, in file order; none is a valid (empty) deploy.
    #[serde(default)]
    pub plugins: Vec<PluginEntry>,
    /// The `[workflows]` table: which model folders serve the files ComfyUI workflows name.
    #[serde(default)]
    pub workflows: fastvideo_comfy::WorkflowConfig,
    /// The `[[adapters]]` tables: LoRA files requests may name, pinned by hash.
    #[serde(default)]
    pub adapters: Vec<AdapterEntry>,
}

/// One `[[adapters]]` table: a LoRA file requests may name (`lora[i].name`), pinned by hash.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdapterEntry {
    /// What requests call it (unique in the deploy).
    pub name: String,
    /// Path of the `.safetensors` file, relative to the deploy file.
    pub source: PathBuf,
    /// Hex blake3 of the file (`fastvideo lora inspect` prints it); a different file refuses to
    /// start.
    pub blake3: String,
    /// Strength for requests that give none.
    #[serde(default = "one")]
    pub default_scale: f64,
    /// For the world model's sessions (`--world`) instead of the served model.
    #[serde(default)]
    pub world: bool,
    /// For the served model of that name (`[[models]]`) instead of the primary one.
    #[serde(default)]
    pub model: Option<String>,
}

fn one() -> f64 {
    1.0
}

/// One `[[plugins]]` table: a component to enable, pinned by hash.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginEntry {
    /// The plugin's name in this deploy (unique): requests key its parameters by it, and errors,
    /// logs and events name it.
    pub name: String,
    /// Path of the `.wasm` component, relative to the deploy file.
    pub source: PathBuf,
    /// Hex blake3 of the file (`fastvideo plugin hash`); a different file refuses to start.
    pub blake3: String,
    /// Interfaces the plugin may import (`tensor`, `tensor-ops`, `tensor-read`, `log`, `events`, `clock`; see [`crate::PROVIDED`]).
    #[serde(default)]
    pub grants: Vec<String>,
    /// Default parameters, overridden per request by `plugin_params.<name>`.
    #[serde(default)]
    pub params: toml::Table,
}

/// A plugin enabled by the deploy, compiled and ready to instantiate per request.
pub struct EnabledPlugin {
    /// The compiled, linked component and its audit.
    pub plugin: LoadedPlugin,
    /// The entry's `params` as JSON, already checked against the plugin's schema.
    pub defaults: serde_json::Value,
    schema: Option<jsonschema::Validator>,
}

impl EnabledPlugin {
    /// The plugin's name in the deploy ([`PluginEntry::name`]).
    pub fn name(&self) -> &str {
        &self.plugin.name
    }

    /// Exact mode's rule: an exact request runs as the reference would, so a plugin that alters
    /// the sampled distribution (its manifest says so) is not called for it — a guider falls
    /// back to built-in CFG, a block or step cache computes everything. Observers still run.
    pub fn bypassed_for(&self, req: &ResolvedRequest) -> bool {
        req.exact && self.plugin.audit.manifest.distribution_altering
    }

    /// The deploy defaults overlaid with the request's `plugin_params.<name>` (key by key),
    /// checked against the plugin's schema.
    pub fn params_for(&self, req: &ResolvedRequest) -> Result<serde_json::Value, PluginError> {
        let mut merged = self.defaults.clone();
        if let Some(over) = req.plugin_params.get(self.name()) {
            let (Some(m), Some(o)) = (merged.as_object_mut(), over.as_object()) else {
                return Err(self.refuse(format!("plugin_params.{}: must be a JSON object", self.name())));
            };
            for (k, v) in o {
                m.insert(k.clone(), v.clone());
            }
        }
        self.validate(&merged).map_err(|e| self.refuse(format!("plugin_params.{}: {e}", self.name())))?;
        Ok(merged)
    }

    fn validate(&self, params: &serde_json::Value) -> Result<(), String> {
        match &self.schema {
            Some(v) => v.validate(params).map_err(|e| {
                let at = e.instance_path.to_string();
                if at.is_empty() {
                    e.to_string()
                } else {
                    format!("{} {e}", at.trim_start_matches('/'))
                }
            }),
            None => Ok(()),
        }
    }

    fn refuse(&self, reason: String) -> PluginError {
        PluginError::Refused { plugin: self.name().to_string(), reason }
    }
}

/// Every plugin of a deploy, loaded.
pub struct Deployment {
    /// The engine every plugin of the deploy is compiled in and instantiated from.
    pub runtime: Arc<PluginRuntime>,
    /// The enabled plugins, in deploy-file order.
    pub plugins: Vec<Arc<EnabledPlugin>>,
    /// Model folders for ComfyUI workflows' model files (paths as written in the deploy file).
    pub workflows: fastvideo_comfy::WorkflowConfig,
    /// The LoRA adapters requests to the primary model may name, their files' hashes checked and
    /// formats read.
    pub adapters: Vec<AdapterSource>,
    /// The ones for the world model's sessions.
    pub world_adapters: Vec<AdapterSource>,
    /// The ones for other served models, by the model's name (`model = NAME`).
    pub model_adapters: std::collections::BTreeMap<String, Vec<AdapterSource>>,
}

/// An `[[adapters]]` entry with its file read: it exists, its hash is the pinned one, and it is a
/// LoRA file in a format this runtime reads. Which modules its keys name is the model family's
/// (its key map), so that and whether it fits the model are checked when the model is loaded.
fn adapter_source(a: AdapterEntry, base: &Path) -> Result<AdapterSource, PluginError> {
    let refuse = |why: String| PluginError::Io(format!("[[adapters]] `{}`: {why}", a.name));
    if a.name.trim().is_empty() {
        return Err(PluginError::Io("[[adapters]]: an entry without a name".into()));
    }
    let path = base.join(&a.source);
    let bytes = std::fs::read(&path).map_err(|e| refuse(format!("source {}: {e}", path.display())))?;
    let actual = blake3_hex(&bytes);
    if !actual.eq_ignore_ascii_case(a.blake3.trim()) {
        return Err(refuse(format!(
            "blake3 of {} is {actual}, the deploy pins {} (replaced file?)",
            path.display(),
            a.blake3.trim()
        )));
    }
    fastvideo_lora::LoraFile::check_format(&bytes).map_err(|e| refuse(format!("{}: {e}", path.display())))?;
    Ok(AdapterSource { name: a.name, path, blake3: actual, default_scale: a.default_scale })
}

/// Schedules of this many steps or fewer run without step and block caches.
pub const FEW_STEPS: u32 = 4;

impl Deployment {
    /// Reads, hashes, audits, compiles and links every plugin of a deploy file.
    pub fn load(path: &Path) -> Result<Self, PluginError> {
        let text = std::fs::read_to_string(path).map_err(|e| PluginError::Io(format!("{}: {e}", path.display())))?;
        let cfg: DeployConfig =
            toml::from_str(&text).map_err(|e| PluginError::Io(format!("{}: {}", path.display(), e.message())))?;
        Self::from_config(cfg, path.parent().unwrap_or(Path::new(".")))
    }

    /// [`load`](Self::load) for a config already parsed, `source` paths relative to `base`.
    /// Refuses, naming the plugin, a name listed twice, a file that is missing, altered (hash) or
    /// not a loadable plugin, ungranted imports, defaults the schema rejects, and a second
    /// guider, block or step interceptor.
    pub fn from_config(cfg: DeployConfig, base: &Path) -> Result<Self, PluginError> {
        let runtime = Arc::new(PluginRuntime::new(cfg.limits)?);
        let mut plugins: Vec<Arc<EnabledPlugin>> = Vec::new();
        let workflows = cfg.workflows;
        for p in cfg.plugins {
            let refuse = |reason: String| PluginError::Refused { plugin: p.name.clone(), reason };
            if plugins.iter().any(|q| q.name() == p.name) {
                return Err(refuse("listed twice".into()));
            }
            let file = base.join(&p.source);
            let bytes = std::fs::read(&file).map_err(|e| refuse(format!("source {}: {e}", file.display())))?;
            let actual = blake3_hex(&bytes);
            if !actual.eq_ignore_ascii_case(p.blake3.trim()) {
                return Err(refuse(format!(
                    "blake3 of {} is {actual}, the deploy pins {} (rebuilt or replaced file?)",
                    file.display(),
                    p.blake3.trim()
                )));
            }
            let plugin = runtime.load(&p.name, &bytes, &p.grants).map_err(|e| match e {
                PluginError::Invalid { reason } => refuse(reason),
                other => other,
            })?;
            let schema = match &plugin.audit.manifest.params_schema {
                serde_json::Value::Null => None,
                s => Some(jsonschema::validator_for(s).map_err(|e| refuse(format!("params_schema: {e}")))?),
            };
            let defaults = serde_json::to_value(&p.params).map_err(|e| refuse(format!("params: {e}")))?;
            let enabled = EnabledPlugin { plugin, defaults, schema };
            enabled.validate(&enabled.defaults).map_err(|e| refuse(format!("params: {e}")))?;
            plugins.push(Arc::new(enabled));
        }
        for (kind, what) in [
            (PluginKind::Guider, "guider"),
            (PluginKind::StreamGuider, "stream guider"),
            (PluginKind::BlockInterceptor, "block interceptor"),
            (PluginKind::StepInterceptor, "step interceptor"),
            (PluginKind::ExpertRouter, "expert router"),
        ] {
            let named: Vec<&str> =
                plugins.iter().filter(|p| p.plugin.audit.manifest.kind == kind).map(|p| p.name()).collect();
            if named.len() > 1 {
                return Err(PluginError::Refused {
                    plugin: named[1].to_string(),
                    reason: format!("a deploy enables one {what}; found {}", named.join(", ")),
                });
            }
        }
        let (mut adapters, mut world_adapters) = (Vec::new(), Vec::new());
        let mut model_adapters = std::collections::BTreeMap::<String, Vec<AdapterSource>>::new();
        for a in cfg.adapters {
            let list = match (a.world, &a.model) {
                (true, Some(m)) => {
                    return Err(PluginError::Io(format!(
                        "[[adapters]] `{}`: `world = true` and `model = \"{m}\"` name two models; give one",
                        a.name
                    )))
                }
                (true, None) => &mut world_adapters,
                (false, Some(m)) => model_adapters.entry(m.clone()).or_default(),
                (false, None) => &mut adapters,
            };
            let source = adapter_source(a, base)?;
            if list.iter().any(|b: &AdapterSource| b.name == source.name) {
                return Err(PluginError::Io(format!("[[adapters]] `{}` is listed twice", source.name)));
            }
            list.push(source);
        }
        Ok(Self { runtime, plugins, workflows, adapters, world_adapters, model_adapters })
    }

    /// The adapters requests to the served model `model` may name (`primary`: the one requests
    /// naming no model get, which also takes the entries without `model`).
    pub fn adapters_for(&self, model: &str, primary: bool) -> Vec<AdapterSource> {
        let named = self.model_adapters.get(model).into_iter().flatten().cloned();
        if primary {
            self.adapters.iter().cloned().chain(named).collect()
        } else {
            named.collect()
        }
    }

    /// The enabled plugin of that deploy name, if any.
    pub fn get(&self, name: &str) -> Option<&Arc<EnabledPlugin>> {
        self.plugins.iter().find(|p| p.name() == name)
    }

    /// The enabled plugins of one kind, in deploy-file order.
    pub fn of_kind(&self, kind: PluginKind) -> impl Iterator<Item = &Arc<EnabledPlugin>> {
        self.plugins.iter().filter(move |p| p.plugin.audit.manifest.kind == kind)
    }

    /// The step or block cache that would run for `req` when its schedule has [`FEW_STEPS`]
    /// steps or fewer: such a cache reuses work across steps, and a few-step distilled schedule,
    /// where each step moves the sample far, leaves none to reuse (it would skip the steps that
    /// matter). Admission refuses the request naming it.
    pub fn few_step_cache(&self, req: &ResolvedRequest) -> Option<&str> {
        if req.steps > FEW_STEPS {
            return None;
        }
        [PluginKind::StepInterceptor, PluginKind::BlockInterceptor]
            .into_iter()
            .flat_map(|k| self.of_kind(k))
            .find(|p| !p.bypassed_for(req))
            .map(|p| p.name())
    }

    /// Request-time checks: parameters only for enabled plugins, valid against their schema, and
    /// none for distribution-altering plugins in exact mode.
    pub fn check_request(&self, req: &ResolvedRequest) -> Result<(), PluginError> {
        for name in req.plugin_params.keys() {
            let Some(p) = self.get(name) else {
                return Err(PluginError::Refused {
                    plugin: name.clone(),
                    reason: format!("plugin_params.{name}: no plugin of that name is enabled in this deploy"),
                });
            };
            if p.bypassed_for(req) {
                return Err(PluginError::Refused {
                    plugin: name.clone(),
                    reason: format!(
                        "plugin_params.{name}: `{name}` alters the sampled distribution, so an exact request runs \
                         without it; drop its parameters or `exact`"
                    ),
                });
            }
        }
        for p in &self.plugins {
            p.params_for(req)?;
        }
        Ok(())
    }
}
