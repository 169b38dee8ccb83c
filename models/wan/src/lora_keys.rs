//! Wan's LoRA names ([`WanKeys`]): the original Wan repository's module names (as ComfyUI and
//! LightX2V ship them) and kohya/musubi-tuner's underscored ones, mapped to the model's own
//! (diffusers') module names as diffusers' Wan converters (`lora_conversion_utils.py`) map them,
//! more leniently where diffusers crashes on a partial file.

use fastvideo_lora::KeyMap;

/// Wan's [`KeyMap`], for the transformer of every Wan model (2.1, 2.2, image-to-video, world).
#[derive(Clone, Copy, Debug, Default)]
pub struct WanKeys;

impl KeyMap for WanKeys {
    fn family(&self) -> &str {
        "Wan"
    }
    fn original(&self, module: &str) -> Option<String> {
        original_to_diffusers(module)
    }
    fn kohya(&self, module: &str) -> Option<String> {
        kohya_to_diffusers(module)
    }
    /// Norms, modulation tables, the patch convolution, the image embedder's norms and position
    /// table.
    fn not_linear(&self, module: &str) -> bool {
        ["norm", "modulation", "patch_embedding", "img_emb.proj.0", "img_emb.proj.4", "emb_pos"]
            .iter()
            .any(|p| module.contains(p) || module.contains(&p.replace('.', "_")))
    }
    /// As diffusers' `convert_wan_transformer_to_diffusers`: the modulation tables, the per-head
    /// norms, norm3 (the cross-attention norm, diffusers' norm2; the two swap names), the image
    /// embedder's norms and position table, the patch convolution.
    fn original_tensor(&self, name: &str) -> Option<String> {
        const TOP: [(&str, &str); 5] = [
            ("head.modulation", "scale_shift_table"),
            ("patch_embedding.", "patch_embedding."),
            ("img_emb.proj.0.", "condition_embedder.image_embedder.norm1."),
            ("img_emb.proj.4.", "condition_embedder.image_embedder.norm2."),
            ("img_emb.emb_pos", "condition_embedder.image_embedder.pos_embed"),
        ];
        const BLOCK: [(&str, &str); 8] = [
            ("modulation", "scale_shift_table"),
            ("norm3.", "norm2."),
            ("norm2.", "norm3."),
            ("self_attn.norm_q.", "attn1.norm_q."),
            ("self_attn.norm_k.", "attn1.norm_k."),
            ("cross_attn.norm_q.", "attn2.norm_q."),
            ("cross_attn.norm_k.", "attn2.norm_k."),
            ("cross_attn.norm_k_img.", "attn2.norm_added_k."),
        ];
        let rename = |table: &[(&str, &str)], s: &str| {
            table.iter().find_map(|(o, d)| match o.ends_with('.') {
                true => s.strip_prefix(o).map(|rest| format!("{d}{rest}")),
                false => (s == *o).then(|| d.to_string()),
            })
        };
        match name.strip_prefix("blocks.").and_then(|r| r.split_once('.')) {
            Some((i, rest)) if i.parse::<u32>().is_ok() => rename(&BLOCK, rest).map(|d| format!("blocks.{i}.{d}")),
            Some(_) => None,
            None => rename(&TOP, name),
        }
    }
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
fn original_to_diffusers(m: &str) -> Option<String> {
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
    use fastvideo_lora::{place, Format, Part, Place};

    use super::WanKeys;

    fn wan(format: Format, key: &str) -> Result<Place, String> {
        place(&WanKeys, format, key)
    }

    #[test]
    fn every_format_names_the_same_module() {
        let want = Place::Module("blocks.12.attn1.to_q".into(), Part::Down);
        assert_eq!(wan(Format::Diffusers, "transformer.blocks.12.attn1.to_q.lora_A.weight"), Ok(want));
        for (format, key) in [
            (Format::Original, "diffusion_model.blocks.12.self_attn.q.lora_down.weight"),
            (Format::Original, "diffusion_model.blocks.12.self_attn.q.lora_A.weight"),
            (Format::Kohya, "lora_unet_blocks_12_self_attn_q.lora_down.weight"),
            (Format::Kohya, "lora_unet_blocks_12_attn1_to_q.lora_down.weight"),
        ] {
            assert_eq!(wan(format, key), Ok(Place::Module("blocks.12.attn1.to_q".into(), Part::Down)), "{key}");
        }
        assert_eq!(
            wan(Format::Original, "diffusion_model.blocks.0.cross_attn.k_img.diff_b"),
            Ok(Place::Module("blocks.0.attn2.add_k_proj".into(), Part::DiffB))
        );
        assert_eq!(wan(Format::Kohya, "lora_unet_head_head.alpha"), Ok(Place::Module("proj_out".into(), Part::Alpha)));
        assert_eq!(wan(Format::Original, "diffusion_model.blocks.0.norm3.diff"), Ok(Place::Ignored));
        assert_eq!(wan(Format::Original, "diffusion_model.blocks.0.modulation.diff"), Ok(Place::Ignored));
        assert!(wan(Format::Original, "diffusion_model.blocks.0.self_attn.x.lora_down.weight").is_err());
        assert!(wan(Format::Original, "diffusion_model.blocks.0.self_attn.q.weight").is_err());
        assert_eq!(
            wan(Format::Diffusers, "text_encoder.encoder.block.0.layer.0.SelfAttention.q.lora_A.weight"),
            Ok(Place::Text("encoder.block.0.layer.0.SelfAttention.q".into(), Part::Down))
        );
        assert_eq!(wan(Format::Kohya, "lora_te_encoder_block_0.lora_down.weight"), Ok(Place::KohyaText));
        assert_eq!(Format::detect(["a", "lora_unet_x"]), Format::Kohya);
    }

    /// Single-file checkpoints: every tensor of the original layout has the name diffusers'
    /// `convert_wan_transformer_to_diffusers` gives it.
    #[test]
    fn original_checkpoint_tensors_take_diffusers_names() {
        let name = |k: &str| fastvideo_lora::checkpoint_name(&WanKeys, k);
        for (original, model) in [
            ("model.diffusion_model.blocks.3.self_attn.q.weight", "blocks.3.attn1.to_q.weight"),
            ("blocks.3.cross_attn.o.bias", "blocks.3.attn2.to_out.0.bias"),
            ("blocks.0.ffn.0.weight", "blocks.0.ffn.net.0.proj.weight"),
            ("blocks.0.modulation", "blocks.0.scale_shift_table"),
            ("blocks.0.norm3.weight", "blocks.0.norm2.weight"),
            ("blocks.0.cross_attn.norm_k_img.weight", "blocks.0.attn2.norm_added_k.weight"),
            ("head.modulation", "scale_shift_table"),
            ("head.head.bias", "proj_out.bias"),
            ("patch_embedding.weight", "patch_embedding.weight"),
            ("time_projection.1.weight", "condition_embedder.time_proj.weight"),
            ("img_emb.proj.4.bias", "condition_embedder.image_embedder.norm2.bias"),
            ("diffusion_model.img_emb.emb_pos", "condition_embedder.image_embedder.pos_embed"),
        ] {
            assert_eq!(name(original).as_deref(), Ok(model), "{original}");
        }
        assert!(name("blocks.0.self_attn.x.weight").is_err());
        assert!(name("blocks.x.modulation").is_err());
        assert_eq!(Format::detect(["diffusion_model.x"]), Format::Original);
    }
}
