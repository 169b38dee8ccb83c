//! Write fastvideo plugins in a few lines: the guest side of the plugin ABI
//! (`wit/fastvideo-plugin`), as one trait per plugin kind, the host's tensor operations, and a
//! typed [`manifest!`].
//!
//! A plugin implements one kind's trait, exports it with that kind's macro and declares its
//! manifest. This is `plugins/guiders/cfg`:
//!
//! ```no_run
//! use fastvideo_plugin_sdk::{tensor_ops, Guider, StepContext, Tensor};
//!
//! struct Cfg;
//!
//! impl Guider for Cfg {
//!     fn init(_params: String) -> Result<Vec<String>, String> {
//!         Ok(vec!["cond".into(), "uncond".into()])
//!     }
//!
//!     fn combine(ctx: StepContext, preds: Vec<Tensor>) -> Result<Tensor, String> {
//!         let [cond, uncond] = preds.as_slice() else { return Err("cfg: expected 2 predictions".into()) };
//!         let delta = tensor_ops::sub(cond, uncond)?;
//!         tensor_ops::add(uncond, &tensor_ops::scale(&delta, ctx.guidance_scale))
//!     }
//! }
//!
//! fastvideo_plugin_sdk::export_guider!(Cfg);
//! fastvideo_plugin_sdk::manifest! {
//!     name: "cfg",
//!     version: "0.1.0",
//!     kind: guider,
//!     hooks: [combine],
//!     distribution_altering: false,
//!     params_schema: { "type": "object", "properties": {}, "additionalProperties": false },
//! }
//! # fn main() {}
//! ```
//!
//! (`no_run`: host calls only exist inside the fastvideo host; built for
//! `wasm32-unknown-unknown` and wrapped by `fastvideo plugin componentize`, this is a plugin.)
//!
//! The manifest travels in the component as the custom section `fastvideo-manifest`, so
//! `fastvideo plugin audit` reads it without running the plugin; [`manifest!`] writes the WIT
//! version this SDK was built against ([`WIT_VERSION`]) into it.

#![cfg_attr(not(test), no_std)]
#![deny(missing_docs)]
extern crate alloc;

pub mod comfy;
mod manifest;

#[doc(hidden)]
pub use manifest::{json_bytes, json_len, Part};

/// The version of the `fastvideo:plugin` WIT package this SDK is generated from; [`manifest!`]
/// records it, and a host loads only the versions it supports.
pub const WIT_VERSION: &str = env!("FASTVIDEO_WIT_VERSION");

/// A monotonic microsecond clock (the `clock` grant).
pub use __imports::fastvideo::plugin::clock;
/// Events into the request's stream (the `events` grant).
pub use __imports::fastvideo::plugin::events;
/// Log lines attributed to the plugin (the `log` grant).
pub use __imports::fastvideo::plugin::log;
pub use __imports::fastvideo::plugin::tensor::Tensor;
/// Host tensor arithmetic (the `tensor-ops` grant): runs on the tensors' device, no data copied.
pub use __imports::fastvideo::plugin::tensor_ops;
/// Copies tensor data into the sandbox (the `tensor-read` grant), up to the deploy's cap.
pub use __imports::fastvideo::plugin::tensor_read;
pub use __imports::fastvideo::plugin::types::{Dtype, StepContext};

/// A block interceptor (block cache): decides which transformer blocks run. Export with
/// [`export_block_interceptor!`].
pub use __block_interceptor::exports::fastvideo::plugin::block_interceptor::{BlockAction, Guest as BlockInterceptor};
/// A guider: turns the guidance branches' predictions into one. Export with [`export_guider!`].
pub use __guider::exports::fastvideo::plugin::guider::Guest as Guider;
/// An observer: read-only events of a request's life. Export with [`export_observer!`].
pub use __observer::exports::fastvideo::plugin::observer::{Event, Guest as Observer};
/// A reward: scores a finished video. Export with [`export_reward!`].
pub use __reward::exports::fastvideo::plugin::reward::Guest as Reward;
/// A step interceptor: sees every solver step and may supply its output, skipping the forwards.
/// Export with [`export_step_interceptor!`].
pub use __step_interceptor::exports::fastvideo::plugin::step_interceptor::Guest as StepInterceptor;
/// A stream guider: turns every stream's branch predictions into each stream's guided output
/// (models that denoise several streams in one loop, such as LTX-2's video and audio). Export
/// with [`export_stream_guider!`].
pub use __stream_guider::exports::fastvideo::plugin::stream_guider::{Guest as StreamGuider, StreamPreds};
/// A workflow translator: one ComfyUI node into pipeline graph nodes (pure data). Export with
/// [`export_workflow_translator!`].
pub use __workflow_translator::exports::fastvideo::plugin::workflow_translator::{
    ComfyNode, GraphNode, Guest as WorkflowTranslator, NodeInput,
};

pub use __block_interceptor::export_block_interceptor;
pub use __expert_router::export_expert_router;
/// An expert router: which expert of a two-expert model runs each step (pure data). Export with
/// [`export_expert_router!`].
pub use __expert_router::exports::fastvideo::plugin::expert_router::{ExpertRoute, Experts, Guest as ExpertRouter};
pub use __guider::export_guider;
pub use __observer::export_observer;
pub use __reward::export_reward;
pub use __step_interceptor::export_step_interceptor;
pub use __stream_guider::export_stream_guider;
pub use __workflow_translator::export_workflow_translator;

// Generated bindings. Every world shares one copy of the imported interfaces, so a `Tensor`
// is the same type whichever kind uses it; plugins use the re-exports above, not these paths.

#[doc(hidden)]
#[allow(missing_docs, clippy::all)]
pub mod __imports {
    wit_bindgen::generate!({
        path: "../../wit/fastvideo-plugin",
        inline: "
            package fastvideo:sdk;
            world imports {
                import fastvideo:plugin/tensor@0.1.5;
                import fastvideo:plugin/tensor-ops@0.1.5;
                import fastvideo:plugin/tensor-read@0.1.5;
                import fastvideo:plugin/log@0.1.5;
                import fastvideo:plugin/events@0.1.5;
                import fastvideo:plugin/clock@0.1.5;
            }
        ",
        world: "fastvideo:sdk/imports",
        generate_all,
    });
}

/// One kind's world over the shared imports: `with` points each imported interface at
/// [`__imports`], so a `Tensor` is one type whichever kind uses it. (Arguments are `tt` so the
/// bindings macro sees plain literals.)
macro_rules! kind {
    ($module:ident, $world:tt, $export:tt, $bindings:tt, [$($iface:tt => $seg:ident),* $(,)?]) => {
        #[doc(hidden)]
        #[allow(missing_docs, clippy::all)]
        pub mod $module {
            wit_bindgen::generate!({
                path: "../../wit/fastvideo-plugin",
                world: $world,
                with: { $($iface: crate::__imports::fastvideo::plugin::$seg),* },
                pub_export_macro: true,
                export_macro_name: $export,
                default_bindings_module: $bindings,
            });
        }
    };
}

kind!(
    __guider,
    "fastvideo:plugin/guider-plugin@0.1.5",
    "export_guider",
    "fastvideo_plugin_sdk::__guider",
    [
        "fastvideo:plugin/types@0.1.5" => types,
        "fastvideo:plugin/tensor@0.1.5" => tensor,
        "fastvideo:plugin/tensor-ops@0.1.5" => tensor_ops,
        "fastvideo:plugin/tensor-read@0.1.5" => tensor_read,
        "fastvideo:plugin/log@0.1.5" => log,
    ]
);

kind!(
    __stream_guider,
    "fastvideo:plugin/stream-guider-plugin@0.1.5",
    "export_stream_guider",
    "fastvideo_plugin_sdk::__stream_guider",
    [
        "fastvideo:plugin/types@0.1.5" => types,
        "fastvideo:plugin/tensor@0.1.5" => tensor,
        "fastvideo:plugin/tensor-ops@0.1.5" => tensor_ops,
        "fastvideo:plugin/tensor-read@0.1.5" => tensor_read,
        "fastvideo:plugin/log@0.1.5" => log,
    ]
);

kind!(
    __step_interceptor,
    "fastvideo:plugin/step-interceptor-plugin@0.1.5",
    "export_step_interceptor",
    "fastvideo_plugin_sdk::__step_interceptor",
    [
        "fastvideo:plugin/types@0.1.5" => types,
        "fastvideo:plugin/tensor@0.1.5" => tensor,
        "fastvideo:plugin/tensor-ops@0.1.5" => tensor_ops,
        "fastvideo:plugin/tensor-read@0.1.5" => tensor_read,
        "fastvideo:plugin/log@0.1.5" => log,
        "fastvideo:plugin/events@0.1.5" => events,
        "fastvideo:plugin/clock@0.1.5" => clock,
    ]
);

kind!(
    __block_interceptor,
    "fastvideo:plugin/block-interceptor-plugin@0.1.5",
    "export_block_interceptor",
    "fastvideo_plugin_sdk::__block_interceptor",
    [
        "fastvideo:plugin/types@0.1.5" => types,
        "fastvideo:plugin/tensor@0.1.5" => tensor,
        "fastvideo:plugin/tensor-ops@0.1.5" => tensor_ops,
        "fastvideo:plugin/tensor-read@0.1.5" => tensor_read,
        "fastvideo:plugin/log@0.1.5" => log,
        "fastvideo:plugin/events@0.1.5" => events,
        "fastvideo:plugin/clock@0.1.5" => clock,
    ]
);

kind!(
    __observer,
    "fastvideo:plugin/observer-plugin@0.1.5",
    "export_observer",
    "fastvideo_plugin_sdk::__observer",
    [
        "fastvideo:plugin/types@0.1.5" => types,
        "fastvideo:plugin/tensor@0.1.5" => tensor,
        "fastvideo:plugin/tensor-ops@0.1.5" => tensor_ops,
        "fastvideo:plugin/tensor-read@0.1.5" => tensor_read,
        "fastvideo:plugin/log@0.1.5" => log,
        "fastvideo:plugin/events@0.1.5" => events,
        "fastvideo:plugin/clock@0.1.5" => clock,
    ]
);

kind!(
    __reward,
    "fastvideo:plugin/reward-plugin@0.1.5",
    "export_reward",
    "fastvideo_plugin_sdk::__reward",
    [
        "fastvideo:plugin/types@0.1.5" => types,
        "fastvideo:plugin/tensor@0.1.5" => tensor,
        "fastvideo:plugin/tensor-ops@0.1.5" => tensor_ops,
        "fastvideo:plugin/tensor-read@0.1.5" => tensor_read,
        "fastvideo:plugin/log@0.1.5" => log,
    ]
);

kind!(
    __expert_router,
    "fastvideo:plugin/expert-router-plugin@0.1.5",
    "export_expert_router",
    "fastvideo_plugin_sdk::__expert_router",
    [
        "fastvideo:plugin/types@0.1.5" => types,
        "fastvideo:plugin/log@0.1.5" => log,
    ]
);

kind!(
    __workflow_translator,
    "fastvideo:plugin/workflow-translator-plugin@0.1.5",
    "export_workflow_translator",
    "fastvideo_plugin_sdk::__workflow_translator",
    [
        "fastvideo:plugin/log@0.1.5" => log,
    ]
);
