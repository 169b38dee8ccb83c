//! Host bindings generated from `wit/fastvideo-plugin` (world `host`: every import the host
//! provides, every export a plugin kind may have). Tensor handles map to [`PluginTensor`].

pub use crate::state::PluginTensor;

wasmtime::component::bindgen!({
    path: "../../wit/fastvideo-plugin",
    world: "host",
    imports: { default: trappable },
    with: { "fastvideo:plugin/tensor.tensor": PluginTensor },
});
