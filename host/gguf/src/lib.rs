//! GGUF, the file format llama.cpp's ggml writes and the community uses for quantized
//! diffusion transformers (ComfyUI-GGUF's `convert.py`, QuantStack's Wan repacks).
//!
//! Why our own reader: the format is a short header, a key/value table and a tensor table
//! before 32-byte-aligned data, and a loader must check every count, offset and size against
//! the file before trusting it (the reader is fuzzed: `fastvideo-fuzz gguf-file`). The Rust
//! crates that parse it are either young single-author projects or part of a whole tensor
//! library (candle); neither fits a loader that maps the file and hands byte ranges to the
//! device.
//!
//! - [`GgufFile::parse`]: the tables of a mapped file, every tensor's byte range checked.
//! - [`GgmlType`]: the tensor types, their block sizes and byte counts.
//! - [`dequantize`]: ggml's block formats to `f32`, the CPU path and the reference the GPU
//!   kernel is checked against.

mod dequant;
mod file;
mod types;

pub use dequant::{dequantize, first_bad_scale};
pub use file::{GgufFile, TensorInfo, Value};
pub use types::GgmlType;
