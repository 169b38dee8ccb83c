//! Key names: which format a file is in, and each key's module (in diffusers' names, which are
//! the model's own) and part. The format's part here (suffixes, prefixes) is every family's; the
//! module names of the original and kohya formats are the family's [`KeyMap`]. A key we cannot
//! place is an error that names it, where diffusers' converters silently drop some.

use crate::KeyMap;

/// How a file names its modules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// diffusers / PEFT: `transformer.blocks.0.attn1.to_q.lora_A.weight`.
    Diffusers,
    /// The original repository's names under `diffusion_model.`, as ComfyUI loads them: Wan's
    /// `diffusion_model.blocks.0.self_attn.q.lora_down.weight` (+ `.alpha`, `.diff`, `.diff_b`) as
    /// LightX2V ships them, BFL's `diffusion_model.double_blocks.0.img_attn.qkv.lora_A.weight`.
    Original,
    /// kohya / musubi-tuner: `lora_unet_blocks_0_self_attn_q.lora_down.weight`.
    Kohya,
}

impl Format {
    /// The format's name as the summary and error messages print it.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Diffusers => "diffusers",
            Format::Original => "original (diffusion_model.…)",
            Format::Kohya => "kohya",
        }
    }

    /// The format of a file from its keys: the first key with a telling prefix decides.
    pub fn detect<'a>(keys: impl IntoIterator<Item = &'a str>) -> Format {
        for k in keys {
            if k.starts_with("diffusion_model.") || k.starts_with("model.diffusion_model.") {
                return Format::Original;
            }
            if k.starts_with("lora_unet_") {
                return Format::Kohya;
            }
        }
        Format::Diffusers
    }
}

/// What a key holds for its module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// `lora_A` / `lora_down`: `[rank, in]`.
    Down,
    /// `lora_B` / `lora_up`: `[out, rank]`.
    Up,
    /// A scalar: the low-rank pair is scaled by `alpha / rank`.
    Alpha,
    /// A full-weight difference `[out, in]`.
    Diff,
    /// A bias difference `[out]` (`diff_b`, or diffusers' `lora_B.bias`).
    DiffB,
}

/// Where a key goes.
#[derive(Debug, PartialEq, Eq)]
pub enum Place {
    /// Module (the model's own name, diffusers', e.g. `blocks.0.attn1.to_q`) and part.
    Module(String, Part),
    /// A difference for a module that is not a linear (norms, modulation tables, the patch
    /// convolution). diffusers drops these too; we report how many.
    Ignored,
    /// A text-encoder module (transformers' names: `encoder.block.0.layer.0.SelfAttention.q`)
    /// and part.
    Text(String, Part),
    /// A kohya text-encoder key (`lora_te_…`), whose underscored names do not map back to
    /// modules unambiguously.
    KohyaText,
}

const SUFFIXES: [(&str, Part); 12] = [
    (".lora_A.weight", Part::Down),
    (".lora_B.weight", Part::Up),
    // PEFT's state dict with the adapter's name in it (`default`), as some trainers save it.
    (".lora_A.default.weight", Part::Down),
    (".lora_B.default.weight", Part::Up),
    (".lora_B.bias", Part::DiffB),
    (".lora_down.weight", Part::Down),
    (".lora_up.weight", Part::Up),
    (".lora.down.weight", Part::Down),
    (".lora.up.weight", Part::Up),
    (".alpha", Part::Alpha),
    (".diff_b", Part::DiffB),
    (".diff", Part::Diff),
];

fn split_part(key: &str) -> Option<(&str, Part)> {
    SUFFIXES.iter().find_map(|(s, p)| key.strip_suffix(s).map(|m| (m, *p)))
}

/// A key as its format alone names it, before a family's [`KeyMap`] places it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Named<'a> {
    /// A diffusers name: the model's own already.
    Model(&'a str, Part),
    /// A diffusers text-encoder name (transformers' names).
    Text(&'a str, Part),
    /// An original-format name, after `diffusion_model.`.
    Original(&'a str, Part),
    /// A kohya name, after `lora_unet_`.
    Kohya(&'a str, Part),
    /// A kohya text-encoder key (`lora_te_…`).
    KohyaText,
}

/// What the format says of `key`: its part and its module in the format's own names; `Err`
/// says why it is not a key of a `format` LoRA file.
pub(crate) fn named(format: Format, key: &str) -> Result<Named<'_>, String> {
    let Some((module, part)) = split_part(key) else {
        return Err("not a LoRA tensor (expected a name ending in lora_A/lora_B/lora_down/lora_up .weight, .alpha, \
                    .diff or .diff_b)"
            .into());
    };
    Ok(match format {
        Format::Diffusers => {
            if let Some(m) = module.strip_prefix("text_encoder.") {
                return Ok(Named::Text(m, part));
            }
            let m = module.strip_prefix("transformer.").or_else(|| module.strip_prefix("base_model.model."));
            Named::Model(m.unwrap_or(module), part)
        }
        Format::Original => {
            let m = module.strip_prefix("model.").unwrap_or(module);
            let m = m.strip_prefix("diffusion_model.").ok_or("an original-format key without `diffusion_model.`")?;
            Named::Original(m, part)
        }
        Format::Kohya => {
            if module.starts_with("lora_te") {
                return Ok(Named::KohyaText);
            }
            let m = module.strip_prefix("lora_unet_").ok_or("a kohya-format key without `lora_unet_`")?;
            Named::Kohya(m, part)
        }
    })
}

/// The module and part of `key` in a file of `format`, the family's names placed by `map`;
/// `Err` says why it has no place.
pub fn place(map: &dyn KeyMap, format: Format, key: &str) -> Result<Place, String> {
    let (module, part, mapped) = match named(format, key)? {
        Named::Model(m, p) => return Ok(Place::Module(m.to_string(), p)),
        Named::Text(m, p) => return Ok(Place::Text(m.to_string(), p)),
        Named::KohyaText => return Ok(Place::KohyaText),
        Named::Original(m, p) => (m, p, map.original(m)),
        Named::Kohya(m, p) => (m, p, map.kohya(m)),
    };
    let is_diff = matches!(part, Part::Diff | Part::DiffB);
    match mapped {
        Some(m) => Ok(Place::Module(m, part)),
        None if is_diff && map.not_linear(module) => Ok(Place::Ignored),
        None => Err(format!("names no module LoRA can target in this model family ({})", map.family())),
    }
}
