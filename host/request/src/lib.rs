//! The request plane (docs/architecture.md): what a caller asks for, what it gets back, and what it sees
//! while it waits.
//!
//! Everything here is plain serde data with no tensors, so the CLI, the HTTP server and plugins can
//! share it. A request declares its [`TaskType`]; nothing is inferred from which inputs happen to be
//! present. [`OmniRequest::resolve`] checks a request against a model's [`ModelLimits`] and fills
//! defaults, producing a [`ResolvedRequest`] whose every parameter is concrete — the only form the
//! pipeline accepts.

mod action;
mod error;
mod event;
mod output;
mod request;
mod resolve;

pub use action::ActionPart;
pub use error::RequestError;
pub use event::OmniEvent;
pub use output::{Artifact, LatentsArtifact, OmniOutput, RequestMetrics, VideoArtifact};
pub use request::{
    DiffusionParams, InputPart, Modality, OmniRequest, OutputSpec, SamplerKind, SamplingParams, TaskType, TextRole,
};
pub use resolve::{Defaults, ModelLimits, ResolvedRequest};
