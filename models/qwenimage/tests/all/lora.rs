//! LoRA on the Qwen-Image transformer against diffusers' `load_lora_weights` + peft, in each
//! format people ship (fixtures from tests/fixtures/make_image_lora_fixtures.py), unmerged at a
//! strength, merged, and per sample in a pack.

use std::sync::Arc;

use fastvideo_layers::adapters::Adapted;
use fastvideo_lora::{place, Format, LoraFile, Place};
use fastvideo_pipeline::{AdapterSet, AdapterTarget};
use fastvideo_qwenimage::lora_keys::QwenImageKeys;
use fastvideo_qwenimage::transformer::Sample;
use fastvideo_qwenimage::QwenImageTransformer;
use tch::{Device, Kind, Tensor};

use crate::common::{fixture, folder, load, rel};

fn transformer(zero_cond_t: bool) -> Adapted<QwenImageTransformer> {
    let dir = folder().join("transformer");
    let mut cfg = fastvideo_qwenimage::config::TransformerConfig::load(&dir.join("config.json")).unwrap();
    cfg.zero_cond_t = zero_cond_t;
    let w =
        fastvideo_torch::weights::Weights::from_dir(&dir, "diffusion_pytorch_model", Device::Cpu, Kind::Float).unwrap();
    Adapted(Arc::new(QwenImageTransformer::new(cfg, &w).unwrap()))
}

fn set(t: &Adapted<QwenImageTransformer>, name: &str, strength: f64) -> AdapterSet {
    let path = fixture(&format!("image_lora/qwenimage_{name}.safetensors"));
    let file = LoraFile::read(&path, &QwenImageKeys).unwrap();
    AdapterSet::new(vec![(Arc::new(t.prepare(&file, name, "hash").unwrap()), strength)])
}

/// The component fixture's inputs: `(image [24, 16], text [7, 32])` of one 4×6 sample.
fn inputs() -> (Tensor, Tensor) {
    let f = load("qwenimage/transformer.safetensors");
    (f["hidden_states"].get(0), f["encoder_hidden_states"].get(0))
}

const GRIDS: [(i64, i64); 1] = [(4, 6)];

fn sample(i: &(Tensor, Tensor)) -> Sample<'_> {
    Sample { image: &i.0, grids: &GRIDS, text: &i.1, timestep: 0.731 }
}

/// diffusers/PEFT names with header metadata, `diffusion_model.` names with alphas, kohya's
/// underscored names, and a Lightning-style file (unprefixed, lora_down/up, bfloat16): unmerged
/// at 0.8 and merged at 1 within float32 rounding of peft's (1e-5), and unmerging restores the
/// weights.
#[test]
fn every_format_matches_diffusers_unmerged_and_merged() {
    let want = load("image_lora/outputs.safetensors");
    let base = load("qwenimage/transformer.safetensors")["out"].get(0);
    let t = transformer(false);
    let i = inputs();
    for name in ["diffusers", "original", "kohya", "lightning"] {
        let unmerged = set(&t, name, 0.8);
        let out = t.forward_adapted(&[sample(&i)], &[Some(&unmerged)]).unwrap().remove(0);
        let reference = want[&format!("qwenimage.{name}.unmerged")].get(0);
        assert!(rel(&base, &reference) > 0.05, "{name}: the adapter must move the output");
        let e = rel(&out, &reference);
        eprintln!("{name}: unmerged {e:.2e}");
        assert!(e < 1e-5, "{name} unmerged: {e:.2e}");

        let full = set(&t, name, 1.0);
        t.merge(&full).unwrap();
        let merged = t.forward_adapted(&[sample(&i)], &[Some(&full)]).unwrap().remove(0);
        let e = rel(&merged, &want[&format!("qwenimage.{name}.fused")].get(0));
        eprintln!("{name}: merged {e:.2e}");
        assert!(e < 1e-5, "{name} merged: {e:.2e}");
        assert!(t.forward_adapted(&[sample(&i)], &[None]).is_err());
        t.unmerge();
        assert!(t.merged().is_none());
        let plain = t.forward_packed(&[sample(&i)]).remove(0);
        assert!(rel(&plain, &base) < 1e-5, "{name}: unmerged weights");
    }
}

/// Samples with different adapters (and none) in one pack each equal their solo run, with
/// Edit-2511's `zero_cond_t` too (its modulation runs on the samples' rows twice over).
#[test]
fn samples_of_a_pack_keep_their_own_adapters() {
    for zero_cond in [false, true] {
        let t = transformer(zero_cond);
        let f = load("qwenimage/transformer_zero_cond.safetensors");
        let (image, text) = (f["hidden_states"].get(0), f["encoder_hidden_states"].get(0));
        let grids: &[(i64, i64)] = if zero_cond { &[(4, 6), (2, 3)] } else { &[(5, 6)] };
        let s = || Sample { image: &image, grids, text: &text, timestep: 0.731 };
        let (a, b) = (set(&t, "lightning", 0.8), set(&t, "kohya", 0.6));
        let solo = |x: Option<&AdapterSet>| t.forward_adapted(&[s()], &[x]).unwrap().remove(0);
        let packed = t.forward_adapted(&[s(), s(), s()], &[None, Some(&a), Some(&b)]).unwrap();
        for (out, want) in packed.iter().zip([solo(None), solo(Some(&a)), solo(Some(&b))]) {
            let e = rel(out, &want);
            assert!(e < 1e-5, "zero_cond_t {zero_cond}: packed vs solo {e:.2e}");
        }
        assert!(rel(&packed[0], &packed[1]) > 0.05);
    }
}

/// kohya's underscored names map back to the model's as diffusers' converter maps them; a name
/// of no linear is refused, a norm's difference left out.
#[test]
fn kohya_names_place_as_diffusers_places_them() {
    let module = |format: Format, key: &str| match place(&QwenImageKeys, format, key) {
        Ok(Place::Module(m, _)) => Some(m),
        _ => None,
    };
    let k = |k: &str| module(Format::Kohya, &format!("lora_unet_{k}.lora_down.weight"));
    assert_eq!(
        k("transformer_blocks_3_img_mlp_net_0_proj").as_deref(),
        Some("transformer_blocks.3.img_mlp.net.0.proj")
    );
    assert_eq!(k("transformer_blocks_0_attn_to_out_0").as_deref(), Some("transformer_blocks.0.attn.to_out.0"));
    assert_eq!(k("transformer_blocks_12_attn_add_k_proj").as_deref(), Some("transformer_blocks.12.attn.add_k_proj"));
    assert_eq!(k("transformer_blocks_1_txt_mod_1").as_deref(), Some("transformer_blocks.1.txt_mod.1"));
    assert_eq!(k("norm_out_linear").as_deref(), Some("norm_out.linear"));
    assert_eq!(k("transformer_blocks_1_attn_to_x"), None);
    let o = |k: &str| module(Format::Original, &format!("diffusion_model.{k}.lora_down.weight"));
    assert_eq!(o("transformer_blocks.59.attn.to_add_out").as_deref(), Some("transformer_blocks.59.attn.to_add_out"));
    assert_eq!(o("transformer_blocks.1.attn.norm_q"), None);
    assert_eq!(
        place(&QwenImageKeys, Format::Original, "diffusion_model.transformer_blocks.0.attn.norm_q.diff"),
        Ok(Place::Ignored)
    );
    // PEFT's adapter name inside the key (`lora_A.default.weight`).
    assert_eq!(module(Format::Diffusers, "transformer.img_in.lora_A.default.weight").as_deref(), Some("img_in"));
}
