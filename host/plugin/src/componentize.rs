//! Turns a core wasm module built by the SDK for `wasm32-unknown-unknown` into a component.
//! (The `wasm32-wasip2` target would work too, but its std imports ~15 WASI interfaces, which
//! plugins should not need and deploys should not have to grant.)

use crate::PluginError;

pub fn componentize(core: &[u8]) -> Result<Vec<u8>, PluginError> {
    let invalid = |reason: String| PluginError::Invalid { reason };
    wit_component::ComponentEncoder::default()
        .module(core)
        .map_err(|e| invalid(format!("not an SDK-built core module: {e:#}")))?
        .validate(true)
        .encode()
        .map_err(|e| invalid(format!("componentize: {e:#}")))
}
