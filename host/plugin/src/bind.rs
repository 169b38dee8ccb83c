//! A deploy bound into a pipeline — what every embedder (the CLI, the server, a test, another
//! host) needs from a deploy, so none of them re-implements it: the loop policies, the
//! request-time check and the failure classifier.

use std::sync::Arc;

use fastvideo_pipeline::{
    BlockPolicy, ClassicCfg, ExpertRouting, Guidance, LoopPolicies, Observer, Reward, StepPolicy, StreamGuidance,
};
use fastvideo_request::{RequestError, ResolvedRequest};

use crate::{
    Deployment, PluginBlockPolicy, PluginError, PluginGuider, PluginKind, PluginObserver, PluginReward, PluginRouter,
    PluginStepPolicy, PluginStreamGuider,
};

impl Deployment {
    /// The loop policies this deploy enables: its guider (else built-in CFG), its stream guider,
    /// block and step interceptors and expert router if any, every observer and every reward. `model_id` is what plugins see in their step
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
        let rewards = self
            .of_kind(PluginKind::Reward)
            .map(|p| Arc::new(PluginReward::new(self, p.clone())) as Arc<dyn Reward>)
            .collect();
        let routing = first(PluginKind::ExpertRouter)
            .map(|p| Arc::new(PluginRouter::new(self, p, model_id)) as Arc<dyn ExpertRouting>);
        let stream_guidance = first(PluginKind::StreamGuider)
            .map(|p| Arc::new(PluginStreamGuider::new(self, p, model_id)) as Arc<dyn StreamGuidance>);
        LoopPolicies { guidance, stream_guidance, blocks, steps, observers, rewards, routing, text_stages: Vec::new() }
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

/// A deploy (or none) bound for one model: everything an embedder wires into its pipeline and
/// engine, from one call. Cheap to clone.
#[derive(Clone)]
pub struct Binding {
    deploy: Option<Arc<Deployment>>,
    /// The loop policies to build the pipeline with.
    pub policies: LoopPolicies,
}

impl Deployment {
    /// Binds this deploy for `model_id` (what plugins see in their step context).
    pub fn bind(self: &Arc<Self>, model_id: &str) -> Binding {
        Binding { policies: self.policies(model_id), deploy: Some(Arc::clone(self)) }
    }
}

impl Binding {
    /// No deploy: built-in CFG alone, and requests may carry no `plugin_params`.
    pub fn none() -> Self {
        Binding { deploy: None, policies: LoopPolicies::new(Arc::new(ClassicCfg)) }
    }

    /// [`Deployment::bind`] when there is a deploy, else [`Binding::none`].
    pub fn of(deploy: Option<&Arc<Deployment>>, model_id: &str) -> Self {
        deploy.map_or_else(Self::none, |d| d.bind(model_id))
    }

    /// The bound deploy, if any.
    pub fn deployment(&self) -> Option<&Arc<Deployment>> {
        self.deploy.as_ref()
    }

    /// The request-time check an engine runs at admission: parameters only for enabled
    /// plugins, valid against their schemas, none for a plugin an exact request runs without;
    /// without a deploy, no `plugin_params` at all. The error names the field
    /// (`plugin_params.NAME`).
    pub fn check(&self, r: &ResolvedRequest) -> Result<(), RequestError> {
        if let Some(name) = r.outputs.rewards.iter().find(|n| !self.has_reward(n)) {
            let enabled: Vec<&str> = self.policies.rewards.iter().map(|r| r.name()).collect();
            let known = if enabled.is_empty() {
                "this server enables no reward plugins".to_string()
            } else {
                format!("enabled rewards: {}", enabled.join(", "))
            };
            return Err(RequestError::new("outputs.rewards", format!("no reward plugin named `{name}` ({known})")));
        }
        if let Some(name) = self.deploy.as_ref().and_then(|d| d.few_step_cache(r)) {
            return Err(RequestError::new(
                "diffusion.num_inference_steps",
                format!(
                    "{} steps is a few-step schedule, and this server's cache plugin `{name}` reuses work across \
                     steps, which such a schedule does not leave (each step matters); use more than {} steps, \
                     `exact`, or a server without it",
                    r.steps,
                    crate::deploy::FEW_STEPS
                ),
            ));
        }
        match &self.deploy {
            Some(d) => d.check_request(r).map_err(|e| match &e {
                PluginError::Refused { plugin, .. } => {
                    RequestError::new(format!("plugin_params.{plugin}"), e.to_string())
                }
                _ => RequestError::new("plugin_params", e.to_string()),
            }),
            None if !r.plugin_params.is_empty() => Err(RequestError::new(
                "plugin_params",
                "this server enables no plugins (it was started without --deploy)",
            )),
            None => Ok(()),
        }
    }

    /// Whether the deploy enables a reward plugin named `name`.
    pub fn has_reward(&self, name: &str) -> bool {
        self.policies.rewards.iter().any(|r| r.name() == name)
    }

    /// [`check`](Self::check) as an owned closure, for an engine's admission hook.
    pub fn request_check(&self) -> impl Fn(&ResolvedRequest) -> Result<(), RequestError> + Send + Sync + 'static {
        let me = self.clone();
        move |r| me.check(r)
    }

    /// The error code of a failed request: `plugin_failed` when a plugin call failed anywhere
    /// in its chain (by type, not by message text), else `pipeline_failed`.
    pub fn classify_failure(e: &anyhow::Error) -> &'static str {
        if e.chain().any(|c| matches!(c.downcast_ref::<PluginError>(), Some(PluginError::Call { .. }))) {
            "plugin_failed"
        } else {
            "pipeline_failed"
        }
    }

    /// What is bound where, one line per plugin; empty without a deploy.
    pub fn describe(&self) -> Vec<String> {
        self.deploy.as_ref().map(|d| d.describe()).unwrap_or_default()
    }
}
