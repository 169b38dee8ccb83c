//! Turns a core wasm module built by the SDK for `wasm32-unknown-unknown` into a component.
//! (The `wasm32-wasip2` target would work too, but its std imports ~15 WASI interfaces, which
//! plugins should not need and deploys should not have to grant.)

use crate::{inspect, PluginError, MANIFEST_SECTION};

/// Wraps an SDK-built core module (`wasm32-unknown-unknown`, with its WIT bindings embedded)
/// into a validated component. A module it cannot encode is [`PluginError::Invalid`].
pub fn componentize(core: &[u8]) -> Result<Vec<u8>, PluginError> {
    let invalid = |reason: String| PluginError::Invalid { reason };
    wit_component::ComponentEncoder::default()
        .module(core)
        .map_err(|e| invalid(format!("not an SDK-built core module: {e:#}")))?
        .validate(true)
        .encode()
        .map_err(|e| invalid(format!("componentize: {e:#}")))
}

/// Adds the manifest section to a component built by another toolchain (componentize-py, jco):
/// the Rust SDK's `manifest!` macro does this inside the core module; other languages append
/// it to the finished component. The result is inspected, so a manifest that does not match
/// the component's exports is refused here rather than at deploy time.
pub fn embed_manifest(component: &[u8], manifest_json: &str) -> Result<Vec<u8>, PluginError> {
    let invalid = |reason: String| PluginError::Invalid { reason };
    serde_json::from_str::<crate::Manifest>(manifest_json).map_err(|e| invalid(format!("manifest: {e}")))?;
    if inspect(component).is_ok() {
        return Err(invalid("the component already carries a manifest".into()));
    }
    let mut out = component.to_vec();
    let mut body = Vec::new();
    leb128(&mut body, MANIFEST_SECTION.len() as u64);
    body.extend_from_slice(MANIFEST_SECTION.as_bytes());
    body.extend_from_slice(manifest_json.as_bytes());
    out.push(0); // custom section id
    leb128(&mut out, body.len() as u64);
    out.extend_from_slice(&body);
    inspect(&out)?;
    Ok(out)
}

fn leb128(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}
