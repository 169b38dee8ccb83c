//! Names of the values the FLUX.2 pipeline's nodes pass along.

/// The prompt's embeddings `[1, 512, width]`.
pub const PROMPT_EMBEDS: &str = "prompt_embeds";
/// The negative branch's embeddings (the empty prompt unless the request gives one).
pub const NEGATIVE_EMBEDS: &str = "negative_prompt_embeds";
/// Reference tokens `[N, C]` of an edit, every picture's end to end.
pub const REFERENCE_TOKENS: &str = "reference_tokens";
/// Their positions `[N, 4]`.
pub const REFERENCE_IDS: &str = "reference_ids";
/// The final latents, 2×2-patchified and normalised `[1, 4·latent, h, w]` (the layout of the
/// pipeline's `latents=` argument).
pub const LATENTS: &str = "latents";
/// Decoded pixels `[1, 3, 1, H, W]` in [-1, 1].
pub const FRAMES: &str = "frames";
/// The picture artifact.
pub const VIDEO: &str = "video";
