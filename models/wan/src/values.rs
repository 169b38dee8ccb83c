//! Value names on the graph's edges: what the Wan pipeline's nodes read and write.

/// The prompt's text embeddings.
pub const PROMPT_EMBEDS: &str = "prompt_embeds";
/// The negative prompt's text embeddings (classifier-free guidance).
pub const NEGATIVE_EMBEDS: &str = "negative_prompt_embeds";
/// Latents the denoise loop starts from when supplied; seeded noise otherwise.
pub const INITIAL_LATENTS: &str = "initial_latents";
/// CLIP states of the request's picture(s) (image-conditioned models).
pub const IMAGE_EMBEDS: &str = "image_embeds";
/// The mask and encoded picture(s) appended to the latents' channels (image-conditioned models).
pub const LATENT_CONDITION: &str = "latent_condition";
/// A video-to-video request's encoded input video.
pub const CLEAN_LATENTS: &str = "clean_latents";
/// The denoised latents.
pub const LATENTS: &str = "latents";
/// The VAE's decoded frames, as a tensor.
pub const FRAMES: &str = "frames";
/// The finished video artifact.
pub const VIDEO: &str = "video";
