//! One assembly for every front end: a [`ServeConfig`] (a TOML file, or flags mapped onto it by
//! the [`args`] groups) becomes the engine, its metrics registry and, for `fastvideo serve`, the
//! HTTP server's state. `fastvideo serve` and the Dynamo worker hold no wiring of their own, and
//! the local commands (`generate`, `world`, `workflow run` …) load models through the same
//! [`ModelConfig`], so a new option or input is added here once and reaches every one of them.

#![deny(missing_docs)]

pub mod args;
mod config;
mod engine;
mod extend;
mod lm;
mod local;
mod locate;
mod model;
mod precision;
mod served;
mod server;
mod size;
pub mod world;

pub use config::{
    AdapterConfig, AuthConfig, Drain, HttpConfig, LmConfig, ModelConfig, NamedModel, RestartJobs, SchedulerConfig,
    ServeConfig, SleepTier, StorageConfig, WebRtcConfig, WebhookConfig, WorldConfig,
};
pub use engine::{
    build_engine, deploy_at, engine_config, load_deploy, Assembly, EngineDescription, SchedulerDescription,
};
pub use extend::{
    extend_check, prompt_warnings, unknown_words_warning, with_extender, PromptWarnings, EXTENDER_FOLDER,
};
pub use fastvideo_models::{missing, Autoencoder, Capability, LoadSummary, LoadedModel, ModelKind, SessionOptions};
pub use local::{run_once, run_until, LocalEngine};
pub use locate::{default_i2v_model, default_model, workflow_model_folder, world_model};
pub use model::ModelLocation;
pub use precision::precision_check;
pub use server::{api_keys, build_server, data_dir, Served};
pub use size::parse_size;

#[cfg(test)]
mod tests;
