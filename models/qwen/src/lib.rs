//! Qwen-family decoders (Qwen3, Qwen2.5) in tch, from transformers-layout folders: the language
//! model the autoregressive decode loop runs. One file per component, as in `fastvideo-wan`:
//! [`config`], [`rms_norm`], [`rope`], [`attention`] (grouped-query, Qwen3's q/k norm, Qwen2.5's
//! q/k/v biases), [`mlp`] (SwiGLU), [`layer`], and [`model`]; keys and values live in the decode
//! loop's `KvStore` (contiguous or paged). It implements the decode loop's `CausalLm`; [`chat`] reads the folder's
//! tokenizer and chat template.

#![deny(missing_docs)]

pub mod attention;
pub mod bench;
pub mod chat;
pub mod config;
mod decode_graph;
pub mod extend;
pub mod family;
pub mod language_model;
pub mod layer;
mod lm;
pub mod mlp;
pub mod model;
pub mod rms_norm;
pub mod rope;
pub mod serving;
pub mod shared;
pub mod vision;

pub use chat::{ChatTokenizer, Message};
pub use config::QwenConfig;
pub use extend::PromptExtender;
pub use language_model::{LanguageModel, Reply};
pub use model::QwenForCausalLM;
