//! [`KeyMap`]: what a model family brings so files in its own checkpoint's names can be read.
//! diffusers names are the model's already; the original-format (`diffusion_model.…`) and kohya
//! (`lora_unet_…`) names are each family's own (Wan's `blocks.0.self_attn.q`, FLUX's
//! `double_blocks.0.img_attn.qkv`), so this crate knows the formats and the family the names.

/// How one model family's module names in the original and kohya formats map to the model's own
/// (diffusers') module names. The format's prefixes are stripped before a name gets here.
pub trait KeyMap: Send + Sync {
    /// The family's name, for messages about keys it cannot place (`Wan`).
    fn family(&self) -> &str;

    /// The model's module for an original-format name, the part after `diffusion_model.`
    /// (`blocks.3.self_attn.q` → `blocks.3.attn1.to_q`); `None`: no linear of the model.
    fn original(&self, module: &str) -> Option<String>;

    /// The model's module for a kohya name, the part after `lora_unet_`
    /// (`blocks_3_self_attn_q` → `blocks.3.attn1.to_q`); `None`: no linear of the model.
    fn kohya(&self, module: &str) -> Option<String>;

    /// Whether a name that [`original`](Self::original) or [`kohya`](Self::kohya) does not
    /// place is one of the model's parameters that are not linears (norms, modulation tables, a
    /// patch convolution), whose differences are left out and counted, as diffusers leaves them
    /// out, instead of refusing the file. Given in either format's spelling, prefix stripped.
    fn not_linear(&self, module: &str) -> bool;
}
