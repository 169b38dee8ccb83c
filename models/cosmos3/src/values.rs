//! Names of the values a Cosmos3 run passes between its nodes. `latents`, `sound_latents` and
//! `action_latents` are also the keys of `--noise` files (the pipeline call's arguments).

/// Prompt token ids (int64 `[L]`).
pub const PROMPT_IDS: &str = "prompt_ids";
/// Negative prompt token ids.
pub const NEGATIVE_IDS: &str = "negative_ids";
/// Vision latents `[1, C, T, h, w]` (normalised).
pub const LATENTS: &str = "latents";
/// Sound latents `[C_s, T_s]`.
pub const SOUND_LATENTS: &str = "sound_latents";
/// Action latents `[T_a, action_dim]`.
pub const ACTION_LATENTS: &str = "action_latents";
/// Decoded frames `[1, 3, F, H, W]` in [-1, 1].
pub const FRAMES: &str = "frames";
/// The video artifact.
pub const VIDEO: &str = "video";
/// Clean vision latents `[1, C, T, h, w]` of image to video and continuation.
pub const CONDITION_LATENTS: &str = "condition_latents";
/// Latent frames given clean (int64 `[n]`).
pub const CLEAN_FRAMES: &str = "clean_frames";
/// Clean actions `[chunk, action_dim]` of an action task (forward dynamics: the given ones).
pub const ACTION_CONDITION: &str = "action_condition";
/// Action steps given clean (int64 `[n]`).
pub const ACTION_CLEAN: &str = "action_clean";
