//! The Wasm plugin host: loads WIT-typed components (`wit/fastvideo-plugin`), checks their
//! capabilities (= imported interfaces) against the deploy's grants before linking, and runs
//! them inside the denoise loop with one store per (request, plugin), per-call deadlines and
//! memory caps. Tensors stay on the host; plugins hold handles and call host ops.

mod bind;
pub mod bindings;
mod blocks;
mod build;
mod componentize;
mod deploy;
mod error;
mod guider;
mod manifest;
mod observer;
mod runtime;
mod state;
mod step;

pub use bind::Binding;
pub use blocks::PluginBlockPolicy;
pub use build::build_plugins;
pub use componentize::{componentize, embed_manifest};
pub use deploy::{DeployConfig, Deployment, EnabledPlugin, PluginEntry};
pub use error::{FailureKind, PluginError};
pub use guider::{step_context, PluginGuider};
pub use manifest::{
    blake3_hex, inspect, inspect_any, Audit, Inspection, Manifest, PluginKind, MANIFEST_SECTION, SUPPORTED_WIT,
};
pub use observer::PluginObserver;
pub use runtime::{Limits, LoadedPlugin, PluginInstance, PluginRuntime, PROVIDED};
pub use state::{HostState, InstanceLimits, OutputCounts, PluginEvent, PluginTensor};
pub use step::PluginStepPolicy;
