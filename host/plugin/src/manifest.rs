//! What a plugin says about itself (the `fastvideo-manifest` custom section) and what its
//! component declares (imports = capabilities, exports = kinds), read statically: auditing a
//! plugin never runs it.

use serde::{Deserialize, Serialize};
use wasmparser::{Parser, Payload};

use crate::PluginError;

/// Name of the custom section the SDK's `manifest!` macro writes.
pub const MANIFEST_SECTION: &str = "fastvideo-manifest";
/// WIT package versions this host loads.
pub const SUPPORTED_WIT: &[&str] = &["0.1.0", "0.1.1", "0.1.2", "0.1.3", "0.1.4", "0.1.5"];
const PACKAGE: &str = "fastvideo:plugin/";

/// What a plugin is: the one WIT interface it exports (kebab-case in the manifest, e.g.
/// `step-interceptor`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PluginKind {
    /// Names the guidance branches to run and combines their predictions each step (CFG and
    /// its variants).
    Guider,
    /// Guidance of a model that denoises several streams in one loop (LTX-2's video and audio):
    /// names the branches and combines every stream's predictions each step (since WIT 0.1.5).
    StreamGuider,
    /// Around every solver step: may supply the step's model output, skipping the forwards
    /// (step caches).
    StepInterceptor,
    /// Around the transformer blocks of a forward: sees each block's output and may jump to
    /// another block with a hidden state of its own (block caches).
    BlockInterceptor,
    /// Watches a request's events and may emit its own; changes nothing.
    Observer,
    /// Scores a finished request (RL rollouts, best-of-n): its decoded video (hook `score`), or
    /// its final latents (hook `score-latents`).
    Reward,
    /// Translates a ComfyUI node into pipeline-graph nodes.
    WorkflowTranslator,
    /// Chooses which expert of a two-expert model runs each step, and its guidance scale
    /// (since WIT 0.1.4).
    ExpertRouter,
}

impl PluginKind {
    /// The WIT interface a plugin of this kind exports.
    pub fn interface(self) -> &'static str {
        match self {
            PluginKind::Guider => "guider",
            PluginKind::StreamGuider => "stream-guider",
            PluginKind::StepInterceptor => "step-interceptor",
            PluginKind::BlockInterceptor => "block-interceptor",
            PluginKind::Observer => "observer",
            PluginKind::Reward => "reward",
            PluginKind::WorkflowTranslator => "workflow-translator",
            PluginKind::ExpertRouter => "expert-router",
        }
    }
    /// Hook points a manifest may list for this kind.
    pub fn hooks(self) -> &'static [&'static str] {
        match self {
            PluginKind::Guider | PluginKind::StreamGuider => &["combine"],
            PluginKind::StepInterceptor => &["before-step", "after-step"],
            PluginKind::BlockInterceptor => &["begin-forward", "after-block", "end-forward"],
            PluginKind::Observer => {
                &["request-start", "node-start", "node-end", "step-start", "step-end", "artifact", "request-end"]
            }
            PluginKind::Reward => &["score", "score-latents"],
            PluginKind::WorkflowTranslator => &["translate"],
            PluginKind::ExpertRouter => &["route"],
        }
    }
}

/// The manifest a plugin embeds. Unknown keys are refused so typos surface at audit time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The name its author gave it (a deploy enables it under a name of its own).
    pub name: String,
    /// Its author's version string; informational, the deploy pins the hash.
    pub version: String,
    /// The interface it exports; the component must export it at version `wit`.
    pub kind: PluginKind,
    /// The hooks it implements, from [`PluginKind::hooks`]; an observer is called only for these.
    pub hooks: Vec<String>,
    /// Changes what the model samples (guiders other than plain CFG, caches): refused in exact mode.
    #[serde(default)]
    pub distribution_altering: bool,
    /// Needs eager execution (no graph capture) around its hooks.
    #[serde(default)]
    pub needs_eager: bool,
    /// WIT package version the plugin was built against.
    pub wit: String,
    /// JSON schema of the plugin's parameters.
    #[serde(default)]
    pub params_schema: serde_json::Value,
    /// What it does, in its author's words.
    #[serde(default)]
    pub description: String,
}

/// Everything `fastvideo plugin audit` reports, computed from the bytes alone.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Audit {
    /// Hex blake3 of the bytes: what a deploy pins.
    pub blake3: String,
    /// Size of the component, in bytes.
    pub size: u64,
    /// The embedded manifest, consistent with the exports.
    pub manifest: Manifest,
    /// Imported interfaces, as the component names them (`fastvideo:plugin/tensor-ops@0.1.0`).
    pub imports: Vec<String>,
    /// Exported interfaces, as the component names them (`fastvideo:plugin/guider@0.1.0`).
    pub exports: Vec<String>,
    /// The grants the imports need (`tensor-ops`, `log`, or a full `wasi:…` name).
    pub capabilities: Vec<String>,
}

/// The grant name an import needs; `types` carries no functions and needs none.
fn capability(import: &str) -> Option<String> {
    match import.strip_prefix(PACKAGE) {
        Some(rest) => {
            let iface = rest.split('@').next().unwrap_or(rest);
            (iface != "types").then(|| iface.to_string())
        }
        None => Some(import.to_string()),
    }
}

/// Hex blake3 of `bytes`, the hash a deploy's `blake3` pins.
pub fn blake3_hex(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

/// What any component's bytes say, whether or not it is a loadable plugin: an operator auditing
/// an untrusted file sees its imports and exports first, then why it cannot load.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Inspection {
    /// Hex blake3 of the bytes: what a deploy pins.
    pub blake3: String,
    /// Size of the component, in bytes.
    pub size: u64,
    /// The embedded manifest, if there is one that parses (it may still disagree with the exports).
    pub manifest: Option<Manifest>,
    /// Imported interfaces, as the component names them (`fastvideo:plugin/tensor-ops@0.1.0`).
    pub imports: Vec<String>,
    /// Exported interfaces, as the component names them (`fastvideo:plugin/guider@0.1.0`).
    pub exports: Vec<String>,
    /// The grants the imports need (`tensor-ops`, `log`, or a full `wasi:…` name).
    pub capabilities: Vec<String>,
    /// Why it cannot load as a plugin, every reason found (empty: it can, grants aside).
    pub problems: Vec<String>,
}

/// Reads any component's imports, exports and manifest (if it has a valid one) without
/// compiling or running it. Errors only for bytes that are not a parseable component.
pub fn inspect_any(bytes: &[u8]) -> Result<Inspection, PluginError> {
    let invalid = |reason: String| PluginError::Invalid { reason };
    if !Parser::is_component(bytes) {
        return Err(invalid(if Parser::is_core_wasm(bytes) {
            "a core wasm module, not a component (build for wasm32-unknown-unknown and run `fastvideo plugin componentize`)".into()
        } else {
            "not a WebAssembly component".into()
        }));
    }
    let (mut manifest, mut imports, mut exports) = (None, Vec::new(), Vec::new());
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(bytes) {
        let payload = payload.map_err(|e| invalid(format!("malformed component: {e}")))?;
        match payload {
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentImportSection(s) if depth == 0 => {
                for i in s {
                    imports.push(i.map_err(|e| invalid(format!("import section: {e}")))?.name.name.to_string());
                }
            }
            Payload::ComponentExportSection(s) if depth == 0 => {
                for e in s {
                    exports.push(e.map_err(|e| invalid(format!("export section: {e}")))?.name.name.to_string());
                }
            }
            Payload::CustomSection(c) if c.name() == MANIFEST_SECTION => {
                manifest = Some(
                    serde_json::from_slice::<Manifest>(c.data())
                        .map_err(|e| format!("custom section `{MANIFEST_SECTION}`: {e}")),
                );
            }
            _ => {}
        }
    }
    let mut problems = Vec::new();
    let manifest = match manifest {
        None => {
            problems.push(format!("no `{MANIFEST_SECTION}` custom section (use the SDK's `manifest!` macro)"));
            None
        }
        Some(Err(e)) => {
            problems.push(e);
            None
        }
        Some(Ok(m)) => {
            problems.extend(check_manifest(&m, &exports));
            Some(m)
        }
    };
    let capabilities = imports.iter().filter_map(|i| capability(i)).collect();
    Ok(Inspection {
        blake3: blake3_hex(bytes),
        size: bytes.len() as u64,
        manifest,
        imports,
        exports,
        capabilities,
        problems,
    })
}

/// Reads a plugin's manifest, imports and exports without compiling or running it; refuses,
/// with every reason, a component that is not a loadable plugin.
pub fn inspect(bytes: &[u8]) -> Result<Audit, PluginError> {
    Inspection::into_audit(inspect_any(bytes)?)
}

impl Inspection {
    /// The [`Audit`] of a loadable plugin; with any problem, [`PluginError::Invalid`] listing them all.
    pub fn into_audit(self) -> Result<Audit, PluginError> {
        let Inspection { blake3, size, manifest, imports, exports, capabilities, problems } = self;
        match manifest {
            Some(manifest) if problems.is_empty() => {
                Ok(Audit { blake3, size, manifest, imports, exports, capabilities })
            }
            _ => Err(PluginError::Invalid { reason: problems.join("; ") }),
        }
    }

    /// Capabilities the component needs that `grants` does not give, in import order.
    pub fn missing_grants(&self, grants: &[String]) -> Vec<String> {
        self.capabilities.iter().filter(|c| !grants.contains(c)).cloned().collect()
    }
}

fn check_manifest(m: &Manifest, exports: &[String]) -> Vec<String> {
    let mut problems = Vec::new();
    if !SUPPORTED_WIT.contains(&m.wit.as_str()) {
        problems.push(format!(
            "plugin `{}`: WIT version {} is not one this host loads ({})",
            m.name,
            m.wit,
            SUPPORTED_WIT.join(", ")
        ));
    }
    let want = format!("{PACKAGE}{}@{}", m.kind.interface(), m.wit);
    if !exports.contains(&want) {
        problems.push(format!(
            "plugin `{}`: manifest says kind {:?} but the component does not export `{want}`",
            m.name, m.kind
        ));
    }
    if let Some(h) = m.hooks.iter().find(|h| !m.kind.hooks().contains(&h.as_str())) {
        problems.push(format!(
            "plugin `{}`: unknown hook `{h}` for a {} (known: {})",
            m.name,
            m.kind.interface(),
            m.kind.hooks().join(", ")
        ));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_names() {
        assert_eq!(capability("fastvideo:plugin/tensor-ops@0.1.0").as_deref(), Some("tensor-ops"));
        assert_eq!(capability("fastvideo:plugin/types@0.1.0"), None);
        assert_eq!(capability("wasi:cli/stderr@0.2.6").as_deref(), Some("wasi:cli/stderr@0.2.6"));
    }

    #[test]
    fn rejects_non_components_with_a_reason() {
        let err = inspect(b"\0asm\x01\0\0\0").unwrap_err().to_string();
        assert!(err.contains("core wasm module"), "{err}");
        assert!(inspect(b"hello").unwrap_err().to_string().contains("not a WebAssembly component"));
    }
}
