//! A `workflow-translator` plugin as the ComfyUI compiler's [`Translator`]. Translators are
//! pure data, so one instance serves every call until a call fails (then the next call gets a
//! fresh one); each call runs under the deploy's per-call limits.

use std::sync::{Arc, Mutex};

use fastvideo_comfy::{ComfyNode, GraphNode, Translator, Translators};

use crate::bindings::exports::fastvideo::plugin::workflow_translator as wit;
use crate::deploy::{Deployment, EnabledPlugin};
use crate::runtime::{Guest, PluginInstance, PluginRuntime};
use crate::{FailureKind, PluginError, PluginKind};

/// A translator plugin enabled in a deploy.
pub struct PluginTranslator {
    runtime: Arc<PluginRuntime>,
    plugin: Arc<EnabledPlugin>,
    instance: Mutex<Option<PluginInstance>>,
}

impl PluginTranslator {
    /// Binds `plugin`, which must be a workflow translator enabled in `deploy`.
    pub fn new(deploy: &Deployment, plugin: Arc<EnabledPlugin>) -> Self {
        Self { runtime: deploy.runtime.clone(), plugin, instance: Mutex::new(None) }
    }

    fn with<R>(&self, f: impl FnOnce(&mut PluginInstance) -> Result<R, PluginError>) -> Result<R, String> {
        let mut slot = self.instance.lock().unwrap_or_else(|e| e.into_inner());
        let inst = match slot.as_mut() {
            Some(i) => i,
            None => slot.insert(self.runtime.instantiate(&self.plugin.plugin).map_err(|e| e.to_string())?),
        };
        let r = f(inst);
        if r.is_err() {
            *slot = None;
        }
        // A translator's own refusal is its message; traps and limits say what happened.
        r.map_err(|e| match e {
            PluginError::Call { kind: FailureKind::Returned, message, .. } => message,
            e => e.to_string(),
        })
    }
}

fn translator(g: &Guest) -> &wit::Guest {
    match g {
        Guest::WorkflowTranslator(t) => t,
        _ => unreachable!("loaded as a workflow translator"),
    }
}

impl Translator for PluginTranslator {
    fn name(&self) -> &str {
        self.plugin.name()
    }

    fn handles(&self) -> Result<Vec<String>, String> {
        self.with(|i| i.call("handles", |s, g| translator(g).call_handles(s).map(Ok)))
    }

    fn declare(&self) -> Result<serde_json::Value, String> {
        let json = self.with(|i| i.call("declare", |s, g| translator(g).call_declare(s).map(Ok)))?;
        serde_json::from_str(&json).map_err(|e| format!("not JSON: {e}"))
    }

    fn translate(&self, node: &ComfyNode) -> Result<Vec<GraphNode>, String> {
        let arg = wit::ComfyNode {
            id: node.id.clone(),
            class_type: node.class_type.clone(),
            inputs: node
                .inputs
                .iter()
                .map(|(name, v)| wit::NodeInput { name: name.clone(), value_json: v.to_string() })
                .collect(),
        };
        let out = self.with(|i| i.call("translate", |s, g| translator(g).call_translate(s, &arg)))?;
        out.into_iter()
            .map(|g| {
                let params = serde_json::from_str(&g.params_json)
                    .map_err(|e| format!("graph node `{}`: params are not JSON: {e}", g.name))?;
                Ok(GraphNode {
                    name: g.name,
                    stage: g.stage,
                    inputs: g.inputs,
                    outputs: g.outputs,
                    params,
                    origin: node.id.clone(),
                })
            })
            .collect()
    }
}

impl Deployment {
    /// The deploy's workflow translators, ready for the ComfyUI compiler; an error names the
    /// translator (a failing `handles`/`declare`, two claiming one node type).
    pub fn translators(&self) -> Result<Translators, String> {
        let list = self
            .of_kind(PluginKind::WorkflowTranslator)
            .map(|p| Arc::new(PluginTranslator::new(self, p.clone())) as Arc<dyn Translator>)
            .collect();
        Translators::new(list)
    }
}
