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

    /// The model's modules that a name [`original`](Self::original) or [`kohya`](Self::kohya)
    /// returned stands for, when the format fuses several along their output features (BFL's
    /// `img_attn.qkv` for `to_q`, `to_k`, `to_v`): equal parts, in order. The file's low-rank
    /// pair then applies to each part with the down matrix shared and the up matrix's rows split,
    /// as diffusers' converters split it. `None`: one module.
    fn split(&self, _module: &str) -> Option<Vec<String>> {
        None
    }

    /// The model's name of an original-format tensor that is no linear's weight or bias (norms,
    /// modulation tables, the patch convolution), for single-file checkpoints in the original
    /// layout ([`checkpoint_name`]); `None`: no such tensor.
    fn original_tensor(&self, _name: &str) -> Option<String> {
        None
    }
}

/// The model's (diffusers') name of tensor `key` of a single-file checkpoint in the original
/// layout (`blocks.0.self_attn.q.weight`, bare or under ComfyUI's `model.diffusion_model.`):
/// a linear's weight or bias by [`KeyMap::original`], any other tensor by
/// [`KeyMap::original_tensor`]. `Err` says why it has no place.
pub fn checkpoint_name(map: &dyn KeyMap, key: &str) -> Result<String, String> {
    let name =
        key.strip_prefix("model.diffusion_model.").or_else(|| key.strip_prefix("diffusion_model.")).unwrap_or(key);
    if let Some(t) = map.original_tensor(name) {
        return Ok(t);
    }
    // A linear's weight and bias, and the scales FP8 checkpoints keep beside an FP8 weight
    // (ComfyUI's `scale_weight`/`scale_input`, ModelOpt's `weight_scale`/`input_scale`).
    const PARAMS: [&str; 6] = ["weight", "bias", "scale_weight", "scale_input", "weight_scale", "input_scale"];
    if let Some((module, param)) = name.rsplit_once('.').filter(|(_, p)| PARAMS.contains(p)) {
        if let Some(m) = map.original(module) {
            return Ok(format!("{m}.{param}"));
        }
    }
    Err(format!("is not a tensor of a {} transformer in the original layout", map.family()))
}

/// `{prefix}{i}{sep}{rest}` → `(i, rest)`: a block's index and its module inside the block, in
/// either format's spelling (`blocks.3.self_attn.q` with `.`, `blocks_3_self_attn_q` with `_`).
pub fn block<'a>(module: &'a str, prefix: &str, sep: char) -> Option<(u32, &'a str)> {
    let (i, rest) = module.strip_prefix(prefix)?.split_once(sep)?;
    Some((i.parse().ok()?, rest))
}

/// The name among `names` that kohya's spelling `flat` stands for (every `.` an `_`):
/// `img_mlp_net_0_proj` → `img_mlp.net.0.proj`.
pub fn kohya_name<'a>(flat: &str, names: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    names.into_iter().find(|n| n.len() == flat.len() && n.replace('.', "_") == flat)
}
