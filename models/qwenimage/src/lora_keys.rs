//! Qwen-Image's LoRA names ([`QwenImageKeys`]). The original repository names its modules as
//! diffusers does, so the original format (`diffusion_model.transformer_blocks.0.attn.to_q`, as
//! ComfyUI and the Lightning few-step adapters ship it) needs no renaming; kohya's underscored
//! spelling (`transformer_blocks_0_img_mlp_net_0_proj`) maps back as diffusers' Qwen converter
//! maps it.

use fastvideo_lora::{block, kohya_name, KeyMap};

/// Qwen-Image's [`KeyMap`] (every Qwen-Image transformer: text to image, Edit, Edit-Plus).
#[derive(Clone, Copy, Debug, Default)]
pub struct QwenImageKeys;

/// A block's linear modules.
const BLOCK: [&str; 14] = [
    "attn.to_q",
    "attn.to_k",
    "attn.to_v",
    "attn.to_out.0",
    "attn.add_q_proj",
    "attn.add_k_proj",
    "attn.add_v_proj",
    "attn.to_add_out",
    "img_mod.1",
    "txt_mod.1",
    "img_mlp.net.0.proj",
    "img_mlp.net.2",
    "txt_mlp.net.0.proj",
    "txt_mlp.net.2",
];

/// The linear modules outside the blocks.
const TOP: [&str; 6] = [
    "img_in",
    "txt_in",
    "proj_out",
    "norm_out.linear",
    "time_text_embed.timestep_embedder.linear_1",
    "time_text_embed.timestep_embedder.linear_2",
];

impl KeyMap for QwenImageKeys {
    fn family(&self) -> &str {
        "Qwen-Image"
    }

    fn original(&self, m: &str) -> Option<String> {
        let known = match block(m, "transformer_blocks.", '.') {
            Some((_, rest)) => BLOCK.contains(&rest),
            None => TOP.contains(&m),
        };
        known.then(|| m.to_string())
    }

    fn kohya(&self, m: &str) -> Option<String> {
        match block(m, "transformer_blocks_", '_') {
            Some((i, rest)) => kohya_name(rest, BLOCK).map(|b| format!("transformer_blocks.{i}.{b}")),
            None => kohya_name(m, TOP).map(str::to_string),
        }
    }

    /// The per-head and text norms, the positional embedder.
    fn not_linear(&self, m: &str) -> bool {
        m.contains("norm") || m.contains("pos_embed")
    }
}
