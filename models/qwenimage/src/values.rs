//! Names of the values the Qwen-Image pipeline's nodes pass along.

/// The prompt's embeddings `[L, width]`.
pub const PROMPT_EMBEDS: &str = "prompt_embeds";
/// The negative prompt's embeddings, when guidance runs.
pub const NEGATIVE_EMBEDS: &str = "negative_prompt_embeds";
/// An edit's reference latents, packed `[N, 4·z]`, every picture's end to end.
pub const REFERENCE_TOKENS: &str = "reference_tokens";
/// Their token grids `[k, 2]` (rows, columns), in order.
pub const REFERENCE_GRIDS: &str = "reference_grids";
/// The final packed latents `[1, S, 4·z]` (the layout of the pipeline's `latents=`).
pub const LATENTS: &str = "latents";
/// Decoded pixels `[1, 3, 1, H, W]` in [-1, 1].
pub const FRAMES: &str = "frames";
/// The picture artifact.
pub const VIDEO: &str = "video";
