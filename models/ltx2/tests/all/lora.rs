//! LoRA on the LTX-2 transformer against diffusers' `LTX2LoraLoaderMixin` + peft (fixtures from
//! tests/fixtures/make_ltx2_lora_fixtures.py): PEFT names and Lightricks' original names (the
//! trainer's and ComfyUI's `diffusion_model.` files), unmerged at a strength and merged, and
//! kohya's spelling of the original file.

use std::collections::HashMap;
use std::sync::Arc;

use fastvideo_layers::adapters::Adapted;
use fastvideo_lora::{KeyMap, LoraFile};
use fastvideo_ltx2::lora_keys::Ltx2Keys;
use fastvideo_ltx2::Ltx2Transformer;
use fastvideo_pipeline::{AdapterSet, AdapterTarget};
use tch::{Device, Kind, Tensor};

use crate::common::{fixture, load, rel};
use crate::transformer::run_with;

fn transformer() -> Adapted<Ltx2Transformer> {
    Adapted(Arc::new(Ltx2Transformer::load(&fixture("transformer_23"), Device::Cpu, Kind::Float).unwrap()))
}

fn set(t: &Adapted<Ltx2Transformer>, name: &str, strength: f64) -> AdapterSet {
    let path = fixture(&format!("../ltx2_lora/{name}.safetensors"));
    let file = LoraFile::read(&path, &Ltx2Keys).unwrap();
    AdapterSet::new(vec![(Arc::new(t.prepare(&file, name, "hash").unwrap()), strength)])
}

/// The `plain` case of the component fixture with `set`'s deltas added unmerged (nothing when
/// it is the merged set).
fn forward(t: &Adapted<Ltx2Transformer>, f: &HashMap<String, Tensor>, set: Option<&AdapterSet>) -> (Tensor, Tensor) {
    let rows = t.unmerged(set).unwrap();
    run_with(t, f, "plain", None, rows.as_ref())
}

/// Unmerged at 0.8 and merged at 1 within float32 rounding of peft's (1e-5; measured below
/// 1e-6), on both streams; unmerging restores the weights bit for bit.
#[test]
fn peft_and_original_names_match_diffusers_unmerged_and_merged() {
    let want = load("../ltx2_lora/outputs.safetensors");
    let f = load("transformer_23.safetensors");
    let t = transformer();
    let (base_video, base_audio) = forward(&t, &f, None);
    for name in ["diffusers", "original"] {
        let unmerged = set(&t, name, 0.8);
        let (video, audio) = forward(&t, &f, Some(&unmerged));
        let (rv, ra) = (&want[&format!("{name}.unmerged.video")], &want[&format!("{name}.unmerged.audio")]);
        assert!(rel(&base_video, rv) > 0.05 && rel(&base_audio, ra) > 0.05, "{name}: the adapter must move both");
        let (ev, ea) = (rel(&video, rv), rel(&audio, ra));
        eprintln!("{name}: unmerged video {ev:.2e}, audio {ea:.2e}");
        assert!(ev < 1e-5 && ea < 1e-5, "{name} unmerged: video {ev:.2e}, audio {ea:.2e}");

        let full = set(&t, name, 1.0);
        t.merge(&full).unwrap();
        assert_eq!(t.merged().as_deref(), Some(full.key()));
        let (video, audio) = forward(&t, &f, Some(&full));
        let (ev, ea) =
            (rel(&video, &want[&format!("{name}.fused.video")]), rel(&audio, &want[&format!("{name}.fused.audio")]));
        eprintln!("{name}: merged video {ev:.2e}, audio {ea:.2e}");
        assert!(ev < 1e-5 && ea < 1e-5, "{name} merged: video {ev:.2e}, audio {ea:.2e}");
        // A request with another set while this one is merged would compute on the wrong weights.
        let e = t.unmerged(Some(&unmerged)).err().expect("another set while one is merged").to_string();
        assert!(e.contains("merged"), "{e}");
        t.unmerge();
        let (video, audio) = forward(&t, &f, None);
        assert!(video.equal(&base_video) && audio.equal(&base_audio), "{name}: unmerging restores the weights");
    }
}

/// kohya's names for the original file's tensors, stored in bfloat16: the original file's
/// reference within the rounding of its tensors (measured 5.6e-3 video, 8.8e-3 audio; bound 2e-2,
/// well under what the adapter itself does, over 5e-2).
#[test]
fn kohya_names_are_the_original_files_modules() {
    let want = load("../ltx2_lora/outputs.safetensors");
    let f = load("transformer_23.safetensors");
    let t = transformer();
    let (video, audio) = forward(&t, &f, Some(&set(&t, "kohya", 0.8)));
    let (ev, ea) = (rel(&video, &want["original.unmerged.video"]), rel(&audio, &want["original.unmerged.audio"]));
    eprintln!("kohya: video {ev:.2e}, audio {ea:.2e}");
    assert!(ev < 2e-2 && ea < 2e-2, "kohya: video {ev:.2e}, audio {ea:.2e}");
}

/// Merging walks `linears()`: every module of the table must be reached there exactly once, or a
/// module's delta would be left out of a merged set (and only there).
#[test]
fn every_module_is_one_linear_of_the_merge_walk() {
    let t = transformer();
    let mut slots: Vec<usize> = t.linears().iter().flat_map(|l| l.parts().iter().map(|p| p.slot)).collect();
    slots.sort_unstable();
    assert_eq!(slots, (0..t.modules().len()).collect::<Vec<_>>());
}

/// A file for another model's modules is refused naming the key.
#[test]
fn a_file_for_another_layout_is_refused_naming_the_key() {
    // The 2.0 folder's adapter: caption projections, which the 2.3 layout does not have.
    let t = transformer();
    let path = fixture("../ltx2_lora/pipeline_original.safetensors");
    let file = LoraFile::read(&path, &Ltx2Keys).unwrap();
    let e = format!("{:#}", t.prepare(&file, "x", "hash").unwrap_err());
    assert!(e.contains("caption_projection") || e.contains("shape"), "{e}");
}

#[test]
fn original_names_map_as_diffusers_converts_them() {
    let k = Ltx2Keys;
    for (o, d) in [
        ("patchify_proj", "proj_in"),
        ("audio_patchify_proj", "audio_proj_in"),
        ("adaln_single.linear", "time_embed.linear"),
        ("audio_adaln_single.emb.timestep_embedder.linear_1", "audio_time_embed.emb.timestep_embedder.linear_1"),
        ("av_ca_a2v_gate_adaln_single.linear", "av_cross_attn_video_a2v_gate.linear"),
        ("audio_prompt_adaln_single.linear", "audio_prompt_adaln.linear"),
        ("prompt_adaln_single.linear", "prompt_adaln.linear"),
        ("transformer_blocks.7.audio_to_video_attn.to_out.0", "transformer_blocks.7.audio_to_video_attn.to_out.0"),
        ("transformer_blocks.0.ff.net.0.proj", "transformer_blocks.0.ff.net.0.proj"),
        ("audio_caption_projection.linear_2", "audio_caption_projection.linear_2"),
    ] {
        assert_eq!(k.original(o).as_deref(), Some(d), "{o}");
    }
    assert_eq!(k.original("transformer_blocks.0.attn1.q_norm"), None);
    assert!(k.not_linear("transformer_blocks.0.attn1.q_norm"));
    assert_eq!(k.original("transformer_blocks.0.attn1.to_x"), None);
}

#[test]
fn kohya_names_in_either_spelling() {
    let k = Ltx2Keys;
    for (o, d) in [
        ("transformer_blocks_3_audio_attn2_to_out_0", "transformer_blocks.3.audio_attn2.to_out.0"),
        ("transformer_blocks_12_audio_ff_net_0_proj", "transformer_blocks.12.audio_ff.net.0.proj"),
        ("audio_proj_in", "audio_proj_in"),
        ("adaln_single_linear", "time_embed.linear"),
        ("patchify_proj", "proj_in"),
        ("time_embed_emb_timestep_embedder_linear_2", "time_embed.emb.timestep_embedder.linear_2"),
    ] {
        assert_eq!(k.kohya(o).as_deref(), Some(d), "{o}");
    }
    assert_eq!(k.kohya("transformer_blocks_3_attn9_to_q"), None);
}
