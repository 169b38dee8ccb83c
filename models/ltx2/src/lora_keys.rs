//! LTX-2's LoRA names ([`Ltx2Keys`]): Lightricks' original module names (`patchify_proj`,
//! `adaln_single`, `av_ca_…_adaln_single`), as the LTX trainer and ComfyUI ship them under
//! `diffusion_model.`, mapped to the model's own (diffusers') names as diffusers'
//! `_convert_non_diffusers_ltx2_lora_to_diffusers` maps them; and kohya's underscored spelling of
//! either. The blocks' modules have the same names in both layouts.

use fastvideo_lora::{block, kohya_name, KeyMap};

/// LTX-2's [`KeyMap`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Ltx2Keys;

/// Original → diffusers renames, applied in order to the whole name (diffusers' table).
const RENAMES: [(&str, &str); 9] = [
    ("patchify_proj", "proj_in"),
    ("av_ca_video_scale_shift_adaln_single", "av_cross_attn_video_scale_shift"),
    ("av_ca_a2v_gate_adaln_single", "av_cross_attn_video_a2v_gate"),
    ("av_ca_audio_scale_shift_adaln_single", "av_cross_attn_audio_scale_shift"),
    ("av_ca_v2a_gate_adaln_single", "av_cross_attn_audio_v2a_gate"),
    ("audio_prompt_adaln_single", "audio_prompt_adaln"),
    ("prompt_adaln_single", "prompt_adaln"),
    // Last: the names above end in `adaln_single` too.
    ("audio_adaln_single.", "audio_time_embed."),
    ("adaln_single.", "time_embed."),
];

/// The attention modules of a block and the projections of each.
const ATTENTIONS: [&str; 6] =
    ["attn1", "attn2", "audio_attn1", "audio_attn2", "audio_to_video_attn", "video_to_audio_attn"];
const PROJECTIONS: [&str; 5] = ["to_q", "to_k", "to_v", "to_out.0", "to_gate_logits"];
const FEED_FORWARDS: [&str; 4] = ["ff.net.0.proj", "ff.net.2", "audio_ff.net.0.proj", "audio_ff.net.2"];

/// The timestep modules outside the blocks (each has `emb.timestep_embedder.linear_1/2` and
/// `linear`), in diffusers' names.
const EMBEDDERS: [&str; 8] = [
    "time_embed",
    "audio_time_embed",
    "av_cross_attn_video_scale_shift",
    "av_cross_attn_video_a2v_gate",
    "av_cross_attn_audio_scale_shift",
    "av_cross_attn_audio_v2a_gate",
    "prompt_adaln",
    "audio_prompt_adaln",
];

/// A block's linear modules (the part after `transformer_blocks.N.`).
fn block_modules() -> impl Iterator<Item = String> {
    ATTENTIONS
        .iter()
        .flat_map(|a| PROJECTIONS.iter().map(move |p| format!("{a}.{p}")))
        .chain(FEED_FORWARDS.iter().map(|f| f.to_string()))
}

/// The linear modules outside the blocks, in diffusers' names.
fn top_modules() -> impl Iterator<Item = String> {
    let ends = ["proj_in", "audio_proj_in", "proj_out", "audio_proj_out"].map(String::from);
    let captions = ["caption_projection", "audio_caption_projection"]
        .into_iter()
        .flat_map(|c| ["linear_1", "linear_2"].map(|l| format!("{c}.{l}")));
    let embedders = EMBEDDERS.iter().flat_map(|e| {
        ["emb.timestep_embedder.linear_1", "emb.timestep_embedder.linear_2", "linear"].map(|l| format!("{e}.{l}"))
    });
    ends.into_iter().chain(captions).chain(embedders)
}

/// The original names of the modules outside the blocks, each with its diffusers name.
fn top_original() -> impl Iterator<Item = (String, String)> {
    let renamed: Vec<(&str, &str)> = vec![
        ("adaln_single", "time_embed"),
        ("audio_adaln_single", "audio_time_embed"),
        ("av_ca_video_scale_shift_adaln_single", "av_cross_attn_video_scale_shift"),
        ("av_ca_a2v_gate_adaln_single", "av_cross_attn_video_a2v_gate"),
        ("av_ca_audio_scale_shift_adaln_single", "av_cross_attn_audio_scale_shift"),
        ("av_ca_v2a_gate_adaln_single", "av_cross_attn_audio_v2a_gate"),
        ("prompt_adaln_single", "prompt_adaln"),
        ("audio_prompt_adaln_single", "audio_prompt_adaln"),
    ];
    let embedders = renamed.into_iter().flat_map(|(o, d)| {
        ["emb.timestep_embedder.linear_1", "emb.timestep_embedder.linear_2", "linear"]
            .map(|l| (format!("{o}.{l}"), format!("{d}.{l}")))
    });
    [("patchify_proj", "proj_in"), ("audio_patchify_proj", "audio_proj_in")]
        .map(|(o, d)| (o.to_string(), d.to_string()))
        .into_iter()
        .chain(embedders)
}

/// A diffusers name of a linear of the model (a block's or one outside them), as given.
fn known(m: &str) -> Option<String> {
    if let Some((i, rest)) = block(m, "transformer_blocks.", '.') {
        return block_modules().any(|b| b == rest).then(|| format!("transformer_blocks.{i}.{rest}"));
    }
    top_modules().any(|t| t == m).then(|| m.to_string())
}

impl KeyMap for Ltx2Keys {
    fn family(&self) -> &str {
        "LTX-2"
    }

    fn original(&self, m: &str) -> Option<String> {
        let mut name = m.to_string();
        for (o, d) in RENAMES {
            name = name.replace(o, d);
        }
        known(&name)
    }

    fn kohya(&self, m: &str) -> Option<String> {
        if let Some((i, rest)) = block(m, "transformer_blocks_", '_') {
            let modules: Vec<String> = block_modules().collect();
            let b = kohya_name(rest, modules.iter().map(String::as_str))?;
            return Some(format!("transformer_blocks.{i}.{b}"));
        }
        let tops: Vec<String> = top_modules().collect();
        if let Some(t) = kohya_name(m, tops.iter().map(String::as_str)) {
            return Some(t.to_string());
        }
        let originals: Vec<(String, String)> = top_original().collect();
        let o = kohya_name(m, originals.iter().map(|(o, _)| o.as_str()))?;
        originals.iter().find(|(k, _)| k == o).map(|(_, d)| d.clone())
    }

    /// The per-head and per-stream norms, the modulation tables.
    fn not_linear(&self, m: &str) -> bool {
        m.contains("norm") || m.contains("scale_shift_table")
    }
}
