//! A deploy bound into a pipeline — what every embedder (the CLI, the server, a test, another
//! host) needs from a deploy, so none of them re-implements it: the loop policies, the
//! request-time check and the failure classifier.

use std::sync::Arc;

use fastvideo_pipeline::{BlockPolicy, ClassicCfg, Guidance, LoopPolicies, Observer, StepPolicy};
use fastvideo_request::{RequestError, ResolvedRequest};

use crate::{Deployment, PluginBlockPolicy, PluginError, PluginGuider, PluginKind, PluginObserver, PluginStepPolicy};

impl Deployment {
    /// The loop policies this deploy enables: its guider (else built-in CFG), its block and step
    /// interceptors if any, and every observer. `model_id` is what plugins see in their step
    /// context.
    pub fn policies(&self, model_id: &str) -> LoopPolicies {
        let first = |kind| self.of_kind(kind).next().cloned();
        let guidance: Arc<dyn Guidance> = match first(PluginKind::Guider) {
            Some(g) => Arc::new(PluginGuider::new(self, g, model_id)),
            None => Arc::new(ClassicCfg),
        };
        let blocks = first(PluginKind::BlockInterceptor)
            .map(|b| Arc::new(PluginBlockPolicy::new(self, b, model_id)) as Arc<dyn BlockPolicy>);
        let steps = first(PluginKind::StepInterceptor)
            .map(|p| Arc::new(PluginStepPolicy::new(self, p, model_id)) as Arc<dyn StepPolicy>);
        let observers = self
            .of_kind(PluginKind::Observer)
            .map(|p| Arc::new(PluginObserver::new(self, p.clone(), model_id)) as Arc<dyn Observer>)
            .collect();
        LoopPolicies { guidance, blocks, steps, observers }
    }

    /// What is bound where, one line per plugin (`guider: plugin `cfg` (blake3 …)`), for logs.
    pub fn describe(&self) -> Vec<String> {
        self.plugins
            .iter()
            .map(|p| {
                format!(
                    "{}: plugin `{}` (blake3 {})",
                    p.plugin.audit.manifest.kind.interface(),
                    p.name(),
                    &p.plugin.audit.blake3[..16]
                )
            })
            .collect()
    }
}

/// The loop policies of `deploy`, or built-in CFG alone without one.
pub fn loop_policies(deploy: Option<&Deployment>, model_id: &str) -> LoopPolicies {
    match deploy {
        Some(d) => d.policies(model_id),
        None => LoopPolicies::new(Arc::new(ClassicCfg)),
    }
}

/// The request-time check an engine runs at admission: parameters only for enabled plugins,
/// valid against their schemas, none for a plugin an exact request runs without; without a
/// deploy, no `plugin_params` at all. The error names the field (`plugin_params.NAME`).
pub fn check_request(deploy: Option<&Deployment>, r: &ResolvedRequest) -> Result<(), RequestError> {
    match deploy {
        Some(d) => d.check_request(r).map_err(|e| match &e {
            PluginError::Refused { plugin, .. } => RequestError::new(format!("plugin_params.{plugin}"), e.to_string()),
            _ => RequestError::new("plugin_params", e.to_string()),
        }),
        None if !r.plugin_params.is_empty() => {
            Err(RequestError::new("plugin_params", "this server enables no plugins (it was started without --deploy)"))
        }
        None => Ok(()),
    }
}

/// The error code of a failed request: `plugin_failed` when a plugin call failed anywhere in
/// its chain (by type, not by message text), else `pipeline_failed`.
pub fn classify_failure(e: &anyhow::Error) -> &'static str {
    if e.chain().any(|c| matches!(c.downcast_ref::<PluginError>(), Some(PluginError::Call { .. }))) {
        "plugin_failed"
    } else {
        "pipeline_failed"
    }
}
