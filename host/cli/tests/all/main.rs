//! Every integration test of this crate, as modules of one test binary (wasmtime's `tests/all`
//! layout): each test binary links libtorch, hundreds of MB and the slowest step of a CI build,
//! so one binary per crate instead of one per file. Add a suite as a module here.
//! One suite: `cargo test -p fastvideo --test all -- serve::`.

mod assembly;
mod browser;
mod causal_jobs;
mod chat;
mod cli;
mod comfyui;
mod comfyui_i2v;
mod comfyui_image;
mod comfyui_ltx2;
mod common;
mod cosmos3;
mod default_model;
mod default_sound;
mod device_budget;
mod few_step;
mod flux2;
mod gguf;
mod image_to_video;
mod lora;
mod ltx2;
mod parallel;
mod plugin;
mod prompt_extend;
mod qwenimage;
mod residency;
mod rl;
mod serve;
mod sessions;
mod single_file;
mod store;
mod wan22;
mod webhooks;
mod workflow;
mod world;
