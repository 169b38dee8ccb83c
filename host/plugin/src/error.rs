use thiserror::Error;

/// How a plugin call went wrong. The request that made the call fails with this; the instance
/// is discarded; other requests never see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureKind {
    /// The plugin returned `err(..)`.
    Returned,
    /// A wasm trap (unreachable, bounds, a panic in the guest).
    Trap,
    /// Past the per-call epoch deadline.
    Timeout,
    /// Past the request's plugin-time budget (`max_plugin_ms_per_request`), all calls together.
    Budget,
    /// Out of the per-call fuel.
    Fuel,
    /// The instance hit its memory cap.
    Memory,
    /// A well-typed but wrong answer (a tensor of the wrong shape, too many handles …).
    Invalid,
}

/// Why a plugin could not be audited, loaded, admitted for a request or called.
#[derive(Debug, Error)]
pub enum PluginError {
    /// The file is not a loadable plugin (not a component, no manifest, unknown hook …).
    #[error("invalid plugin: {reason}")]
    Invalid {
        /// What is wrong; every problem found, `; `-separated, where inspection found several.
        reason: String,
    },
    /// The deploy config does not allow it (hash mismatch, missing grants, bad parameters).
    #[error("plugin `{plugin}` refused: {reason}")]
    Refused {
        /// The plugin's deploy name, or the unknown name a request's `plugin_params` used.
        plugin: String,
        /// Why, in words for the operator or the client.
        reason: String,
    },
    /// A call into the plugin failed.
    #[error("plugin `{plugin}` failed in `{hook}` ({kind:?}): {message}")]
    Call {
        /// The plugin's deploy name.
        plugin: String,
        /// The WIT hook called (`init`, `combine`, `after-block` …; `instantiate` for the instance).
        hook: &'static str,
        /// How it failed.
        kind: FailureKind,
        /// The plugin's own error, the limit it hit, or the trap.
        message: String,
    },
    /// Reading or parsing a file, building plugins, or starting the engine failed; the message
    /// names what.
    #[error("{0}")]
    Io(String),
}
