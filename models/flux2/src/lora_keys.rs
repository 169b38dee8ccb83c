//! FLUX.2's LoRA names ([`Flux2Keys`]): BFL's original module names (`double_blocks.0.img_attn.qkv`,
//! `single_blocks.0.linear1`), as ai-toolkit and ComfyUI ship them under `diffusion_model.`, and
//! kohya's underscored spelling of the same, mapped to the model's own (diffusers') names as
//! diffusers' FLUX.2 converters map them. BFL fuses each stream's q, k and v into one `qkv`: that
//! name splits into the three modules ([`KeyMap::split`]).

use fastvideo_lora::{block, kohya_name, KeyMap};

/// FLUX.2's [`KeyMap`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Flux2Keys;

/// The fused names a map returns for BFL's `qkv` (no module of the model is called so).
const IMAGE_QKV: &str = "attn.to_qkv";
const TEXT_QKV: &str = "attn.add_qkv_proj";

/// A double block's modules, BFL → diffusers.
const DOUBLE: [(&str, &str); 8] = [
    ("img_attn.qkv", IMAGE_QKV),
    ("txt_attn.qkv", TEXT_QKV),
    ("img_attn.proj", "attn.to_out.0"),
    ("txt_attn.proj", "attn.to_add_out"),
    ("img_mlp.0", "ff.linear_in"),
    ("img_mlp.2", "ff.linear_out"),
    ("txt_mlp.0", "ff_context.linear_in"),
    ("txt_mlp.2", "ff_context.linear_out"),
];

/// A single block's modules, BFL → diffusers.
const SINGLE: [(&str, &str); 2] = [("linear1", "attn.to_qkv_mlp_proj"), ("linear2", "attn.to_out")];

/// The modules outside the blocks, BFL → diffusers.
const TOP: [(&str, &str); 11] = [
    ("img_in", "x_embedder"),
    ("txt_in", "context_embedder"),
    ("time_in.in_layer", "time_guidance_embed.timestep_embedder.linear_1"),
    ("time_in.out_layer", "time_guidance_embed.timestep_embedder.linear_2"),
    ("guidance_in.in_layer", "time_guidance_embed.guidance_embedder.linear_1"),
    ("guidance_in.out_layer", "time_guidance_embed.guidance_embedder.linear_2"),
    ("final_layer.linear", "proj_out"),
    ("final_layer.adaLN_modulation.1", "norm_out.linear"),
    ("single_stream_modulation.lin", "single_stream_modulation.linear"),
    ("double_stream_modulation_img.lin", "double_stream_modulation_img.linear"),
    ("double_stream_modulation_txt.lin", "double_stream_modulation_txt.linear"),
];

/// A double block's modules in diffusers' names (some files use them under `diffusion_model.`).
const DOUBLE_DIFFUSERS: [&str; 12] = [
    "attn.to_q",
    "attn.to_k",
    "attn.to_v",
    "attn.to_out.0",
    "attn.add_q_proj",
    "attn.add_k_proj",
    "attn.add_v_proj",
    "attn.to_add_out",
    "ff.linear_in",
    "ff.linear_out",
    "ff_context.linear_in",
    "ff_context.linear_out",
];

fn lookup(table: &[(&str, &'static str)], name: &str) -> Option<&'static str> {
    table.iter().find(|(o, _)| *o == name).map(|(_, d)| *d)
}

impl KeyMap for Flux2Keys {
    fn family(&self) -> &str {
        "FLUX.2"
    }

    fn original(&self, m: &str) -> Option<String> {
        if let Some((i, rest)) = block(m, "double_blocks.", '.') {
            return lookup(&DOUBLE, rest).map(|d| format!("transformer_blocks.{i}.{d}"));
        }
        if let Some((i, rest)) = block(m, "single_blocks.", '.') {
            return lookup(&SINGLE, rest).map(|d| format!("single_transformer_blocks.{i}.{d}"));
        }
        // Expanded diffusers names (`sformer_blocks` is an alias some exports write).
        if let Some((i, rest)) = block(m, "transformer_blocks.", '.').or_else(|| block(m, "sformer_blocks.", '.')) {
            return DOUBLE_DIFFUSERS.contains(&rest).then(|| format!("transformer_blocks.{i}.{rest}"));
        }
        if let Some((_, rest)) = block(m, "single_transformer_blocks.", '.') {
            return SINGLE.iter().any(|(_, d)| *d == rest).then(|| m.to_string());
        }
        lookup(&TOP, m).or_else(|| TOP.iter().map(|(_, d)| *d).find(|d| *d == m)).map(str::to_string)
    }

    fn kohya(&self, m: &str) -> Option<String> {
        if let Some((i, rest)) = block(m, "double_blocks_", '_') {
            let o = kohya_name(rest, DOUBLE.iter().map(|(o, _)| *o))?;
            return lookup(&DOUBLE, o).map(|d| format!("transformer_blocks.{i}.{d}"));
        }
        if let Some((i, rest)) = block(m, "single_blocks_", '_') {
            return lookup(&SINGLE, rest).map(|d| format!("single_transformer_blocks.{i}.{d}"));
        }
        let o = kohya_name(m, TOP.iter().map(|(o, _)| *o))?;
        lookup(&TOP, o).map(str::to_string)
    }

    /// The per-head norms (`img_attn.norm.query_norm`), the positional embedder.
    fn not_linear(&self, m: &str) -> bool {
        m.contains("norm") || m.contains("pe_embedder")
    }

    fn split(&self, module: &str) -> Option<Vec<String>> {
        let (head, parts) = if let Some(h) = module.strip_suffix(IMAGE_QKV) {
            (h, ["to_q", "to_k", "to_v"])
        } else {
            (module.strip_suffix(TEXT_QKV)?, ["add_q_proj", "add_k_proj", "add_v_proj"])
        };
        Some(parts.iter().map(|p| format!("{head}attn.{p}")).collect())
    }
}
