//! Names of the values an LTX-2 run passes between its nodes. `latents` and `audio_latents` are
//! also the keys of `--noise` files (the pipeline call's arguments, in its layouts).

/// The video stream's text `[B, L, width]` (rows: negative then prompt with guidance).
pub const VIDEO_TEXT: &str = "video_text";
/// The audio stream's text.
pub const AUDIO_TEXT: &str = "audio_text";
/// The text mask `[B, L]` the transformer's cross-attention takes.
pub const TEXT_MASK: &str = "text_mask";
/// Video latents: given `[1, C, F, H, W]` as the VAE makes them; after the loop, the
/// transformer's (normalised) scale.
pub const LATENTS: &str = "latents";
/// Audio latents `[1, C, L, M]`: given as the audio VAE makes them; after the loop, too.
pub const AUDIO_LATENTS: &str = "audio_latents";
/// Decoded frames `[1, 3, F, H, W]` in [-1, 1].
pub const FRAMES: &str = "frames";
/// The video artifact.
pub const VIDEO: &str = "video";
/// The two-stage recipe: the base loop's video latents upsampled ×2, at the VAE's scale.
pub const UPSAMPLED: &str = "upsampled_latents";
/// Image to video: the first frame's clean latents `[1, C, 1, h, w]` (normalised).
pub const CONDITION: &str = "condition_latents";
/// Keyframe conditioning: the pictures' clean latents `[n, C, h, w]` (normalised), in the
/// request's `keyframes` order.
pub const KEYFRAME_LATENTS: &str = "keyframe_latents";
