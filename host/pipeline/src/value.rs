use std::collections::BTreeMap;

use anyhow::{anyhow, Result};
use fastvideo_request::{AudioArtifact, TrajectoryArtifact, VideoArtifact};
use tch::Tensor;

use crate::session::ActionInbox;

/// A value carried on a pipeline edge.
#[derive(Debug)]
pub enum Value {
    /// A tensor on the run's device (embeddings, latents).
    Tensor(Tensor),
    /// Decoded frames; as a spec's final output it becomes the request's video artifact.
    Video(VideoArtifact),
    /// A decoded waveform; under [`AUDIO`](crate::AUDIO) it becomes the `audio` artifact.
    Audio(AudioArtifact),
    /// A denoise loop's trajectory (`outputs.return_trajectory`); becomes the `trajectory` artifact.
    Trajectory(Box<TrajectoryArtifact>),
    /// A live session's incoming actions ([`session::ACTIONS`](crate::session::ACTIONS)).
    Inbox(ActionInbox),
    /// The request's LoRA adapters ([`ADAPTERS`](crate::ADAPTERS)).
    Adapters(std::sync::Arc<crate::AdapterSet>),
    /// Text made during the run, e.g. the extended prompt ([`EXTENDED_PROMPT`](crate::EXTENDED_PROMPT)).
    Text(String),
}

/// The named values of one request's run. Node names and value names are checked against the
/// [`PipelineSpec`](crate::PipelineSpec) when it is built, so a missing value here is a bug in a
/// stage, reported with the names involved.
#[derive(Debug, Default)]
pub struct Values(BTreeMap<String, Value>);

impl Values {
    /// Stores `v` under `name`, replacing any value already there.
    pub fn insert(&mut self, name: impl Into<String>, v: Value) {
        self.0.insert(name.into(), v);
    }
    /// The tensor named `name`; an error if it was not produced or is not a tensor.
    pub fn tensor(&self, name: &str) -> Result<&Tensor> {
        match self.0.get(name) {
            Some(Value::Tensor(t)) => Ok(t),
            Some(other) => Err(anyhow!("pipeline value `{name}` is not a tensor: {other:?}")),
            None => Err(anyhow!("pipeline value `{name}` was not produced")),
        }
    }
    /// The tensor if the value exists (optional inputs such as negative embeddings).
    pub fn opt_tensor(&self, name: &str) -> Option<&Tensor> {
        match self.0.get(name) {
            Some(Value::Tensor(t)) => Some(t),
            _ => None,
        }
    }
    /// The text if the value exists and is text.
    pub fn opt_text(&self, name: &str) -> Option<&str> {
        match self.0.get(name) {
            Some(Value::Text(t)) => Some(t),
            _ => None,
        }
    }
    /// The action inbox named `name`; an error if absent or not an inbox.
    pub fn inbox(&self, name: &str) -> Result<&ActionInbox> {
        match self.0.get(name) {
            Some(Value::Inbox(i)) => Ok(i),
            Some(other) => Err(anyhow!("pipeline value `{name}` is not an action inbox: {other:?}")),
            None => Err(anyhow!("pipeline value `{name}` was not given (sessions get it from the engine)")),
        }
    }
    /// The adapter set named `name`, if present.
    pub fn adapters(&self, name: &str) -> Option<&std::sync::Arc<crate::AdapterSet>> {
        match self.0.get(name) {
            Some(Value::Adapters(a)) => Some(a),
            _ => None,
        }
    }
    /// Takes the value out, if present.
    pub fn remove(&mut self, name: &str) -> Option<Value> {
        self.0.remove(name)
    }
    /// Whether a value named `name` is present.
    pub fn contains(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }
    /// The names of the values present, in sorted order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }
}
