//! The token half of the engine: an autoregressive decode loop ([`ARDecodeLoop`]) that the step
//! scheduler runs like a denoise loop (one token per step, prefill in bounded chunks), over any
//! causal language model ([`CausalLm`]), with seeded sampling ([`Sampler`]).

mod ar_decode;
mod sampling;

pub use ar_decode::{ARDecodeLoop, CausalLm, DecodeParams, FinishReason, Generation};
pub use sampling::{Sampler, SamplingParams};
