//! Key names: which format a file is in, and each key's module (in diffusers' names, which are
//! the model's own) and part. Mirrors diffusers' Wan converters (`lora_conversion_utils.py`),
//! more leniently where diffusers crashes on a partial file, and strictly where it silently
//! drops keys: a key we cannot place is an error that names it.

/// How a file names its modules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// diffusers / PEFT: `transformer.blocks.0.attn1.to_q.lora_A.weight`.
    Diffusers,
    /// The original Wan repository's names, as ComfyUI and LightX2V ship them:
    /// `diffusion_model.blocks.0.self_attn.q.lora_down.weight` (+ `.alpha`, `.diff`, `.diff_b`).
    Original,
    /// kohya / musubi-tuner: `lora_unet_blocks_0_self_attn_q.lora_down.weight`.
    Kohya,
}

impl Format {
    /// The format's name as the summary and error messages print it.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Diffusers => "diffusers",
            Format::Original => "original (Wan/ComfyUI)",
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
    /// Module (diffusers name, e.g. `blocks.0.attn1.to_q`) and part.
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

const SUFFIXES: [(&str, Part); 10] = [
    (".lora_A.weight", Part::Down),
    (".lora_B.weight", Part::Up),
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

/// The module and part of `key` in a file of `format`; `Err` says why it has no place.
pub fn place(format: Format, key: &str) -> Result<Place, String> {
    let Some((module, part)) = split_part(key) else {
        return Err("not a LoRA tensor (expected a name ending in lora_A/lora_B/lora_down/lora_up .weight, .alpha, \
                    .diff or .diff_b)"
            .into());
    };
    let is_diff = matches!(part, Part::Diff | Part::DiffB);
    let mapped = match format {
        Format::Diffusers => {
            if let Some(m) = module.strip_prefix("text_encoder.") {
                return Ok(Place::Text(m.to_string(), part));
            }
            let m = module.strip_prefix("transformer.").or_else(|| module.strip_prefix("base_model.model."));
            Some(m.unwrap_or(module).to_string())
        }
        Format::Original => {
            let m = module.strip_prefix("model.").unwrap_or(module);
            let m = m.strip_prefix("diffusion_model.").ok_or("an original-format key without `diffusion_model.`")?;
            original_to_diffusers(m)
        }
        Format::Kohya => {
            if module.starts_with("lora_te") {
                return Ok(Place::KohyaText);
            }
            let m = module.strip_prefix("lora_unet_").ok_or("a kohya-format key without `lora_unet_`")?;
            kohya_to_diffusers(m)
        }
    };
    match mapped {
        Some(m) => Ok(Place::Module(m, part)),
        None if is_diff && not_linear(module) => Ok(Place::Ignored),
        None => Err("names no module LoRA can target in this model family".into()),
    }
}

/// Whether a module is one of the original model's parameters that are not linears: norms,
/// modulation tables, the patch convolution, the image embedder's norms and position table.
fn not_linear(module: &str) -> bool {
    ["norm", "modulation", "patch_embedding", "img_emb.proj.0", "img_emb.proj.4", "emb_pos"]
        .iter()
        .any(|p| module.contains(p) || module.contains(&p.replace('.', "_")))
}

/// A block's module in original names (`self_attn.q`) → diffusers (`attn1.to_q`).
fn block_module(rest: &str) -> Option<&'static str> {
    Some(match rest {
        "self_attn.q" => "attn1.to_q",
        "self_attn.k" => "attn1.to_k",
        "self_attn.v" => "attn1.to_v",
        "self_attn.o" => "attn1.to_out.0",
        "cross_attn.q" => "attn2.to_q",
        "cross_attn.k" => "attn2.to_k",
        "cross_attn.v" => "attn2.to_v",
        "cross_attn.o" => "attn2.to_out.0",
        "cross_attn.k_img" => "attn2.add_k_proj",
        "cross_attn.v_img" => "attn2.add_v_proj",
        "ffn.0" => "ffn.net.0.proj",
        "ffn.2" => "ffn.net.2",
        _ => return None,
    })
}

/// Modules outside the blocks, original → diffusers.
const TOP: [(&str, &str); 9] = [
    ("text_embedding.0", "condition_embedder.text_embedder.linear_1"),
    ("text_embedding.2", "condition_embedder.text_embedder.linear_2"),
    ("time_embedding.0", "condition_embedder.time_embedder.linear_1"),
    ("time_embedding.2", "condition_embedder.time_embedder.linear_2"),
    ("time_projection.1", "condition_embedder.time_proj"),
    ("head.head", "proj_out"),
    ("img_emb.proj.1", "condition_embedder.image_embedder.ff.net.0.proj"),
    ("img_emb.proj.3", "condition_embedder.image_embedder.ff.net.2"),
    // Some trainers save the output head without its inner name.
    ("head", "proj_out"),
];

/// `blocks.3.self_attn.q` → `blocks.3.attn1.to_q`.
pub fn original_to_diffusers(m: &str) -> Option<String> {
    if let Some(rest) = m.strip_prefix("blocks.") {
        let (i, rest) = rest.split_once('.')?;
        i.parse::<u32>().ok()?;
        return block_module(rest).map(|d| format!("blocks.{i}.{d}"));
    }
    TOP.iter().find(|(o, _)| *o == m).map(|(_, d)| d.to_string())
}

/// `blocks_3_self_attn_q` (original names) or `blocks_3_attn1_to_q` (diffusers names) →
/// `blocks.3.attn1.to_q`.
fn kohya_to_diffusers(m: &str) -> Option<String> {
    if let Some(rest) = m.strip_prefix("blocks_") {
        let (i, rest) = rest.split_once('_')?;
        i.parse::<u32>().ok()?;
        let original = ["self_attn_", "cross_attn_", "ffn_"]
            .iter()
            .find_map(|p| rest.strip_prefix(p).map(|tail| format!("{}.{tail}", &p[..p.len() - 1])));
        if let Some(d) = original.as_deref().and_then(block_module) {
            return Some(format!("blocks.{i}.{d}"));
        }
        const DIFFUSERS: [&str; 12] = [
            "attn1.to_q",
            "attn1.to_k",
            "attn1.to_v",
            "attn1.to_out.0",
            "attn2.to_q",
            "attn2.to_k",
            "attn2.to_v",
            "attn2.to_out.0",
            "attn2.add_k_proj",
            "attn2.add_v_proj",
            "ffn.net.0.proj",
            "ffn.net.2",
        ];
        return DIFFUSERS.iter().find(|d| d.replace('.', "_") == rest).map(|d| format!("blocks.{i}.{d}"));
    }
    TOP.iter().find(|(o, _)| o.replace('.', "_") == m).map(|(_, d)| d.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_format_names_the_same_module() {
        let want = Place::Module("blocks.12.attn1.to_q".into(), Part::Down);
        assert_eq!(place(Format::Diffusers, "transformer.blocks.12.attn1.to_q.lora_A.weight"), Ok(want));
        for (format, key) in [
            (Format::Original, "diffusion_model.blocks.12.self_attn.q.lora_down.weight"),
            (Format::Original, "diffusion_model.blocks.12.self_attn.q.lora_A.weight"),
            (Format::Kohya, "lora_unet_blocks_12_self_attn_q.lora_down.weight"),
            (Format::Kohya, "lora_unet_blocks_12_attn1_to_q.lora_down.weight"),
        ] {
            assert_eq!(place(format, key), Ok(Place::Module("blocks.12.attn1.to_q".into(), Part::Down)), "{key}");
        }
        assert_eq!(
            place(Format::Original, "diffusion_model.blocks.0.cross_attn.k_img.diff_b"),
            Ok(Place::Module("blocks.0.attn2.add_k_proj".into(), Part::DiffB))
        );
        assert_eq!(
            place(Format::Kohya, "lora_unet_head_head.alpha"),
            Ok(Place::Module("proj_out".into(), Part::Alpha))
        );
        assert_eq!(place(Format::Original, "diffusion_model.blocks.0.norm3.diff"), Ok(Place::Ignored));
        assert_eq!(place(Format::Original, "diffusion_model.blocks.0.modulation.diff"), Ok(Place::Ignored));
        assert!(place(Format::Original, "diffusion_model.blocks.0.self_attn.x.lora_down.weight").is_err());
        assert!(place(Format::Original, "diffusion_model.blocks.0.self_attn.q.weight").is_err());
        assert_eq!(
            place(Format::Diffusers, "text_encoder.encoder.block.0.layer.0.SelfAttention.q.lora_A.weight"),
            Ok(Place::Text("encoder.block.0.layer.0.SelfAttention.q".into(), Part::Down))
        );
        assert_eq!(place(Format::Kohya, "lora_te_encoder_block_0.lora_down.weight"), Ok(Place::KohyaText));
        assert_eq!(Format::detect(["a", "lora_unet_x"]), Format::Kohya);
        assert_eq!(Format::detect(["diffusion_model.x"]), Format::Original);
    }
}
