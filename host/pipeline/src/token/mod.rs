//! The token half of the engine: an autoregressive decode loop ([`ARDecodeLoop`]) that the step
//! scheduler runs like a denoise loop (one token per step, prefill in bounded chunks), over any
//! causal language model ([`CausalLm`]), with seeded sampling ([`Sampler`]) and contiguous or
//! paged key/value storage ([`KvStore`]).

mod ar_decode;
mod kv;
mod paged_batch;
mod sampling;

pub use ar_decode::{check_decode, ARDecodeLoop, CausalLm, DecodeParams, FinishReason, Generation};
pub use kv::{ContiguousKv, KvBlockPool, KvShape, KvStore, PagedKv};
pub use paged_batch::{PagedBatch, PagedPlan};
pub use sampling::{Sampler, SamplingParams};
