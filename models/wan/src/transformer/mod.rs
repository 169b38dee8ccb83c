//! `WanTransformer3DModel` (diffusers `models/transformers/transformer_wan.py`, Wan 2.1 T2V, I2V
//! and FLF2V):
//! patchify with a 3-D conv, 3-D rotary embeddings, blocks of (adaLN-modulated self-attention
//! with RMSNorm on q/k across heads, cross-attention to the text, gated GELU feed-forward), an
//! adaLN output head and unpatchify. Module names equal checkpoint keys.
//!
//! One file per component, as the checkpoint nests them: the config, the attention layers, the
//! rotary tables, one block, weights still arriving (offloaded experts), the image embedder of image-conditioned models, and the model
//! (embeddings, the block loop and the output head).

mod arrivals;
mod attention;
mod block;
mod config;
mod image_embedder;
mod model;
mod rope;

pub use arrivals::{block_group, Arrivals, HEAD_GROUP};
pub use attention::{Cross, KeyValues, Keys};
pub(crate) use block::Call;
pub use block::{Block, BlockInputs};
pub use config::TransformerConfig;
pub(crate) use model::per_token;
pub use model::{fp8_block, WanTransformer3DModel};
pub use rope::Rope;
