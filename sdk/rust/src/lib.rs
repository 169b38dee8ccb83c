//! The guest side of the fastvideo plugin ABI (`wit/fastvideo-plugin`).
//!
//! Each plugin kind is a WIT world; this crate generates the bindings of every world once so a
//! plugin only implements a trait and names itself:
//!
//! (`ignore`: it builds only as a wasm32 plugin; `plugins/guiders/cfg` is this example, built in
//! CI.)
//!
//! ```ignore
//! use fastvideo_plugin_sdk::guider::exports::fastvideo::plugin::guider::Guest;
//! use fastvideo_plugin_sdk::guider::fastvideo::plugin::{tensor::Tensor, tensor_ops, types::StepContext};
//!
//! struct Cfg;
//! impl Guest for Cfg {
//!     fn init(_params: String) -> Result<Vec<String>, String> { Ok(vec!["cond".into(), "uncond".into()]) }
//!     fn combine(ctx: StepContext, preds: Vec<Tensor>) -> Result<Tensor, String> {
//!         let s = ctx.guidance_scale;
//!         tensor_ops::linear_combination(&[&preds[0], &preds[1]], &[s, 1.0 - s])
//!     }
//! }
//! fastvideo_plugin_sdk::guider::export_guider!(Cfg);
//! fastvideo_plugin_sdk::manifest!(r#"{"name": "cfg", "version": "0.1.0", "kind": "guider", ...}"#);
//! ```
//!
//! The manifest travels in the component as the custom section `fastvideo-manifest`, so
//! `fastvideo plugin audit` reads it without running the plugin.

#![no_std]
extern crate alloc;

/// Guider plugins: combine the guidance branches' predictions. Implement `guider::exports::fastvideo::plugin::guider::Guest` and call
/// `export_guider!(YourType)`.
#[allow(missing_docs, clippy::all)]
pub mod guider {
    wit_bindgen::generate!({
        path: "../../wit/fastvideo-plugin",
        world: "guider-plugin",
        pub_export_macro: true,
        export_macro_name: "export_guider",
        default_bindings_module: "fastvideo_plugin_sdk::guider",
    });
}

/// Step interceptors: see every solver step; may supply its output and skip the forwards. Implement `step_interceptor::exports::fastvideo::plugin::step_interceptor::Guest` and call
/// `export_step_interceptor!(YourType)`.
#[allow(missing_docs, clippy::all)]
pub mod step_interceptor {
    wit_bindgen::generate!({
        path: "../../wit/fastvideo-plugin",
        world: "step-interceptor-plugin",
        pub_export_macro: true,
        export_macro_name: "export_step_interceptor",
        default_bindings_module: "fastvideo_plugin_sdk::step_interceptor",
    });
}

/// Block interceptors (block caches): plan which transformer blocks run. Implement `block_interceptor::exports::fastvideo::plugin::block_interceptor::Guest` and call
/// `export_block_interceptor!(YourType)`.
#[allow(missing_docs, clippy::all)]
pub mod block_interceptor {
    wit_bindgen::generate!({
        path: "../../wit/fastvideo-plugin",
        world: "block-interceptor-plugin",
        pub_export_macro: true,
        export_macro_name: "export_block_interceptor",
        default_bindings_module: "fastvideo_plugin_sdk::block_interceptor",
    });
}

/// Observers: read-only events of a request's life. Implement `observer::exports::fastvideo::plugin::observer::Guest` and call
/// `export_observer!(YourType)`.
#[allow(missing_docs, clippy::all)]
pub mod observer {
    wit_bindgen::generate!({
        path: "../../wit/fastvideo-plugin",
        world: "observer-plugin",
        pub_export_macro: true,
        export_macro_name: "export_observer",
        default_bindings_module: "fastvideo_plugin_sdk::observer",
    });
}

/// Rewards: score an artifact. Implement `reward::exports::fastvideo::plugin::reward::Guest` and call
/// `export_reward!(YourType)`.
#[allow(missing_docs, clippy::all)]
pub mod reward {
    wit_bindgen::generate!({
        path: "../../wit/fastvideo-plugin",
        world: "reward-plugin",
        pub_export_macro: true,
        export_macro_name: "export_reward",
        default_bindings_module: "fastvideo_plugin_sdk::reward",
    });
}

/// Workflow translators: ComfyUI node to pipeline graph fragment (pure data). Implement `workflow_translator::exports::fastvideo::plugin::workflow_translator::Guest` and call
/// `export_workflow_translator!(YourType)`.
#[allow(missing_docs, clippy::all)]
pub mod workflow_translator {
    wit_bindgen::generate!({
        path: "../../wit/fastvideo-plugin",
        world: "workflow-translator-plugin",
        pub_export_macro: true,
        export_macro_name: "export_workflow_translator",
        default_bindings_module: "fastvideo_plugin_sdk::workflow_translator",
    });
}

/// Copies a string into a fixed-size array at compile time (used by [`manifest!`]).
#[doc(hidden)]
pub const fn manifest_bytes<const N: usize>(s: &str) -> [u8; N] {
    let b = s.as_bytes();
    let mut out = [0u8; N];
    let mut i = 0;
    while i < N {
        out[i] = b[i];
        i += 1;
    }
    out
}

/// Embeds the plugin manifest (JSON) as the `fastvideo-manifest` custom section.
#[macro_export]
macro_rules! manifest {
    ($json:expr) => {
        const _: () = {
            const JSON: &str = $json;
            #[used]
            #[link_section = "fastvideo-manifest"]
            static MANIFEST: [u8; JSON.len()] = $crate::manifest_bytes::<{ JSON.len() }>(JSON);
        };
    };
}
