//! The Wan transformer over several ranks (issue 18): guidance branches (batch rows) split across
//! CFG groups, and within a group the token sequence split across ranks (Ulysses, see
//! [`sequence_parallel`](fastvideo_layers::sequence_parallel)). The pipeline sees one [`Denoiser`]; the
//! engine's executor thread calls it exactly as the one-device transformer, so the scheduler,
//! guiders, samplers and cancellation are unchanged, and every unit is decided there once.
//!
//! The replicated transformer (`transformer`) is apart from setting a loaded model up for it
//! (`setup`), so the loader, which holds a [`ParallelTransformer`], and the setup, which takes the
//! loaded model, each depend on one side only.

mod setup;
pub(crate) mod transformer;

pub use setup::setup;
pub use transformer::{load_from_files, transformer_checkpoint, LoadOn, ParallelTransformer};
