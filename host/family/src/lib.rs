//! The seam between the runtime and a model family.
//!
//! A family crate (`models/wan`, `models/qwen`, …) implements [`Family`]: its name, the
//! architectures it serves (`model_index.json`'s `_class_name`, `config.json`'s
//! `architectures`) and `load`, which answers a [`LoadedModel`]. Everything above the family —
//! the assembly, the server, the local commands — sees only these two traits: the model's limits,
//! its one pipeline graph, its load summary, and the optional capabilities it offers (adapters,
//! weight updates, residency, sessions, chat, an autoencoder, prompt warnings). A capability a model does not
//! offer is refused by [`missing`], naming the model and the capability.
//!
//! [`Registry`] holds the list of families and detects which one serves a folder, naming the
//! architecture found and the supported ones when none does, before any weights are read.

#![deny(missing_docs)]

mod architecture;
mod context;
mod loaded;
mod registry;
mod rewriter;
mod run_defaults;

pub use architecture::{architecture_of, Architecture};
pub use context::{LoadContext, ModelKind, SleepTier};
pub use loaded::{
    missing, Autoencoder, Capability, ChatPipeline, ChatServing, DrawFrame, LoadSummary, LoadedModel, RequestCheck,
    SessionOptions, UnknownWords, WeightSource,
};
pub use registry::{Family, Registry};
pub use rewriter::PromptRewriter;
pub use run_defaults::RunDefaults;
