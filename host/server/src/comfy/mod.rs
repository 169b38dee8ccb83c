//! ComfyUI's HTTP and WebSocket API, so existing ComfyUI clients drive fastvideo unmodified:
//! `POST /prompt` takes an API-format workflow, which the deploy's translator plugins compile
//! into engine requests; `/queue`, `/history`, `/view`, `/upload/image`, `/object_info`,
//! `/system_stats`, `/interrupt` and `/ws?clientId=` answer with the shapes ComfyUI's own
//! `server.py` gives. Every route is also under `/api/`, as ComfyUI registers them.
//!
//! The deploy's side (`service`: settings, translators, queue) is apart from the HTTP side
//! (`routes`, `files`, `prompt`) and the extractor that joins them (`api`), so the server's
//! state can hold the former without the handlers that read the state.

mod api;
mod files;
mod prompt;
mod queue;
mod routes;
mod service;

pub use routes::routes;
pub use service::{Comfy, ComfyConfig, DeviceInfo};
