//! A reward plugin as one of the pipeline's [`Reward`]s: a fresh instance per scored request
//! (so nothing a plugin keeps can leak between requests), its `init` called with the request's
//! parameters, then `score` with the prompt and a borrowed handle to the decoded video — or to
//! the final latents when its manifest lists the `score-latents` hook.

use std::sync::Arc;

use anyhow::Result;
use fastvideo_pipeline::{PluginMeter, Reward, RewardInput};
use fastvideo_request::ResolvedRequest;
use tch::Tensor;

use crate::deploy::{Deployment, EnabledPlugin};
use crate::runtime::{Guest, PluginRuntime};

/// A reward plugin enabled in a deploy.
pub struct PluginReward {
    runtime: Arc<PluginRuntime>,
    plugin: Arc<EnabledPlugin>,
    input: RewardInput,
}

impl PluginReward {
    /// Binds `plugin`, which must be a reward enabled in `deploy`.
    pub fn new(deploy: &Deployment, plugin: Arc<EnabledPlugin>) -> Self {
        let latents = plugin.plugin.audit.manifest.hooks.iter().any(|h| h == "score-latents");
        let input = if latents { RewardInput::Latents } else { RewardInput::Video };
        Self { runtime: deploy.runtime.clone(), plugin, input }
    }
}

impl Reward for PluginReward {
    fn name(&self) -> &str {
        self.plugin.name()
    }

    fn input(&self) -> RewardInput {
        self.input
    }

    fn score(&self, req: &ResolvedRequest, meter: &PluginMeter, input: &Tensor) -> Result<f32> {
        let (mut inst, _) = self.runtime.start(&self.plugin, req, meter)?;
        let prompt = req.prompt.clone();
        let value = inst.call_lending("score", [input], |store, g, [v]| match g {
            Guest::Reward(g) => g.call_score(store, &prompt, v),
            _ => unreachable!("loaded as a reward"),
        })?;
        anyhow::ensure!(value.is_finite(), "reward `{}` returned {value}, not a finite number", self.name());
        Ok(value)
    }
}
