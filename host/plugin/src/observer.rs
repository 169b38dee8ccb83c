//! An observer plugin watching every request of a pipeline: one instance per request, fed the
//! request's life as WIT `event`s; on step end it borrows the step's guided output. What it
//! emits goes into the request's event stream as `plugin` events.

use std::sync::Arc;

use anyhow::Result;
use fastvideo_pipeline::{Observed, Observer, ObserverState, PluginMeter};
use fastvideo_request::{OmniEvent, ResolvedRequest};
use tch::Tensor;

use crate::bindings::exports::fastvideo::plugin::observer::Event;
use crate::deploy::{Deployment, EnabledPlugin};
use crate::guider::step_context;
use crate::manifest::PluginKind;
use crate::runtime::{Guest, PluginInstance, PluginRuntime};

/// An observer plugin as one of the loop's [`Observer`]s: called only for the events its manifest
/// lists, and for exact requests too, since it cannot alter what is sampled.
pub struct PluginObserver {
    runtime: Arc<PluginRuntime>,
    plugin: Arc<EnabledPlugin>,
    model_id: String,
    hooks: Hooks,
}

impl PluginObserver {
    /// Binds `plugin`, which must be an observer enabled in `deploy`; `model_id` goes into every
    /// step context it sees.
    pub fn new(deploy: &Deployment, plugin: Arc<EnabledPlugin>, model_id: impl Into<String>) -> Self {
        let hooks = Hooks::of(&plugin.plugin.audit.manifest.hooks);
        Self { runtime: deploy.runtime.clone(), plugin, model_id: model_id.into(), hooks }
    }
}

/// The events a plugin's manifest lists: the host calls it for those only, so a watchdog that
/// wants step ends costs nothing on node events.
#[derive(Clone, Copy)]
struct Hooks(u8);

impl Hooks {
    fn of(listed: &[String]) -> Self {
        let names = PluginKind::Observer.hooks();
        Self(listed.iter().filter_map(|h| names.iter().position(|n| n == h)).fold(0, |m, i| m | 1 << i))
    }

    fn wants(self, event: &Observed) -> bool {
        let i = match event {
            Observed::RequestStart => 0,
            Observed::NodeStart(_) => 1,
            Observed::NodeEnd(_) => 2,
            Observed::StepStart(_) => 3,
            Observed::StepEnd(_) => 4,
            Observed::Artifact(_) => 5,
            Observed::RequestEnd(_) => 6,
        };
        self.0 & (1 << i) != 0
    }
}

struct State {
    inst: PluginInstance,
    model_id: String,
    request_id: String,
    hooks: Hooks,
}

impl Observer for PluginObserver {
    fn init(&self, req: &ResolvedRequest, meter: &PluginMeter) -> Result<Box<dyn ObserverState>> {
        let (inst, _) = self.runtime.start(&self.plugin, req, meter)?;
        Ok(Box::new(State {
            inst,
            model_id: self.model_id.clone(),
            request_id: req.request_id.clone(),
            hooks: self.hooks,
        }))
    }
}

impl ObserverState for State {
    fn on_event(&mut self, event: Observed, output: Option<&Tensor>, emit: &mut dyn FnMut(OmniEvent)) -> Result<()> {
        if !self.hooks.wants(&event) {
            return Ok(());
        }
        let ev = match event {
            Observed::RequestStart => Event::RequestStart(self.request_id.clone()),
            Observed::NodeStart(n) => Event::NodeStart(n.to_string()),
            Observed::NodeEnd(n) => Event::NodeEnd(n.to_string()),
            Observed::StepStart(s) => Event::StepStart(step_context(s, None, &self.model_id)),
            Observed::StepEnd(s) => Event::StepEnd(step_context(s, None, &self.model_id)),
            Observed::Artifact(n) => Event::Artifact(n.to_string()),
            Observed::RequestEnd(o) => Event::RequestEnd(o.to_string()),
        };
        let call = |store: &mut _, g: &Guest, output| match g {
            Guest::Observer(g) => g.call_on_event(store, &ev, output),
            _ => unreachable!("loaded as an observer"),
        };
        let result = match output {
            Some(t) => self.inst.call_lending("on-event", [t], |store, g, [r]| call(store, g, Some(r))),
            None => self.inst.call_lending("on-event", [], |store, g, []| call(store, g, None)),
        };
        self.inst.drain_stream_events(&self.request_id).into_iter().for_each(&mut *emit);
        Ok(result?)
    }
}
