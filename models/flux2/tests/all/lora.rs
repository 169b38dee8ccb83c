//! LoRA on the FLUX.2 transformer against diffusers' `load_lora_weights` + peft, in each format
//! people ship (fixtures from tests/fixtures/make_image_lora_fixtures.py), unmerged at a strength,
//! merged, and per sample in a pack.

use std::sync::Arc;

use fastvideo_flux2::lora_keys::Flux2Keys;
use fastvideo_flux2::packed::Sample;
use fastvideo_flux2::Flux2Transformer;
use fastvideo_layers::adapters::Adapted;
use fastvideo_lora::{place, Format, KeyMap, LoraFile, Part, Place};
use fastvideo_pipeline::{AdapterSet, AdapterTarget};
use tch::{Device, Kind, Tensor};

use crate::common::{fixture, folder, load, rel};

fn transformer() -> Adapted<Flux2Transformer> {
    Adapted(Arc::new(Flux2Transformer::load(&folder().join("transformer"), Device::Cpu, Kind::Float).unwrap()))
}

fn set(t: &Adapted<Flux2Transformer>, name: &str, strength: f64) -> AdapterSet {
    let path = fixture(&format!("image_lora/flux2_{name}.safetensors"));
    let file = LoraFile::read(&path, &Flux2Keys).unwrap();
    AdapterSet::new(vec![(Arc::new(t.prepare(&file, name, "hash").unwrap()), strength)])
}

/// The component fixture's inputs: `(image, text, image_ids, text_ids)` of one sample at 0.731.
fn inputs() -> (Tensor, Tensor, Tensor, Tensor) {
    let f = load("flux2/transformer.safetensors");
    let g = |k: &str| f[k].get(0);
    (g("hidden_states"), g("encoder_hidden_states"), g("img_ids"), g("txt_ids"))
}

fn sample<'a>(i: &'a (Tensor, Tensor, Tensor, Tensor)) -> Sample<'a> {
    Sample { image: &i.0, text: &i.1, timestep: 0.731, image_ids: &i.2, text_ids: &i.3 }
}

/// diffusers/PEFT names (header alpha and a rank pattern), BFL's fused `qkv` split over q/k/v,
/// kohya's with alphas in bfloat16: unmerged at 0.8 and merged at 1 within float32 rounding of
/// peft's (1e-5; 1e-6 measured), and unmerging restores the weights bit for bit.
#[test]
fn every_format_matches_diffusers_unmerged_and_merged() {
    let want = load("image_lora/outputs.safetensors");
    let base = load("flux2/transformer.safetensors")["out"].get(0);
    let t = transformer();
    let i = inputs();
    for name in ["diffusers", "bfl", "kohya"] {
        let unmerged = set(&t, name, 0.8);
        let out = t.forward_adapted(&[sample(&i)], &[Some(&unmerged)]).unwrap().remove(0);
        let reference = want[&format!("flux2.{name}.unmerged")].get(0);
        assert!(rel(&base, &reference) > 0.05, "{name}: the adapter must move the output");
        let e = rel(&out, &reference);
        eprintln!("{name}: unmerged {e:.2e}");
        assert!(e < 1e-5, "{name} unmerged: {e:.2e}");

        let full = set(&t, name, 1.0);
        t.merge(&full).unwrap();
        assert_eq!(t.merged().as_deref(), Some(full.key()));
        let merged = t.forward_adapted(&[sample(&i)], &[Some(&full)]).unwrap().remove(0);
        let e = rel(&merged, &want[&format!("flux2.{name}.fused")].get(0));
        eprintln!("{name}: merged {e:.2e}");
        assert!(e < 1e-5, "{name} merged: {e:.2e}");
        // A sample without the merged set would run on the wrong weights.
        assert!(t.forward_adapted(&[sample(&i)], &[None]).is_err());
        t.unmerge();
        let plain = t.forward_packed(&[sample(&i)]).remove(0);
        assert!(rel(&plain, &base) < 1e-5, "{name}: unmerged weights");
    }
}

/// Three samples in one pack (with the adapter, without, with another strength) each equal
/// their solo run: the deltas reach exactly their own sample's tokens and modulations.
#[test]
fn samples_of_a_pack_keep_their_own_adapters() {
    let t = transformer();
    let i = inputs();
    let (a, b) = (set(&t, "bfl", 0.8), set(&t, "bfl", -0.5));
    let solo = |s: Option<&AdapterSet>| t.forward_adapted(&[sample(&i)], &[s]).unwrap().remove(0);
    let packed = t.forward_adapted(&[sample(&i), sample(&i), sample(&i)], &[Some(&a), None, Some(&b)]).unwrap();
    for (out, want) in packed.iter().zip([solo(Some(&a)), solo(None), solo(Some(&b))]) {
        let e = rel(out, &want);
        assert!(e < 1e-5, "packed vs solo: {e:.2e}");
    }
    assert!(rel(&packed[0], &packed[1]) > 0.05);
}

/// BFL and kohya names place where diffusers' converters put them; fused names split in three.
#[test]
fn bfl_and_kohya_names_place_as_diffusers_places_them() {
    let module = |format: Format, key: &str| match place(&Flux2Keys, format, key) {
        Ok(Place::Module(m, _)) => Some(m),
        _ => None,
    };
    let o = |k: &str| module(Format::Original, &format!("diffusion_model.{k}.lora_A.weight"));
    let k = |k: &str| module(Format::Kohya, &format!("lora_unet_{k}.lora_down.weight"));
    assert_eq!(o("double_blocks.1.img_attn.qkv").as_deref(), Some("transformer_blocks.1.attn.to_qkv"));
    assert_eq!(o("double_blocks.0.txt_mlp.2").as_deref(), Some("transformer_blocks.0.ff_context.linear_out"));
    assert_eq!(o("single_blocks.3.linear1").as_deref(), Some("single_transformer_blocks.3.attn.to_qkv_mlp_proj"));
    assert_eq!(o("final_layer.adaLN_modulation.1").as_deref(), Some("norm_out.linear"));
    assert_eq!(o("transformer_blocks.2.attn.to_add_out").as_deref(), Some("transformer_blocks.2.attn.to_add_out"));
    assert_eq!(o("sformer_blocks.2.ff.linear_in").as_deref(), Some("transformer_blocks.2.ff.linear_in"));
    assert_eq!(o("double_blocks.0.img_attn.qkvx"), None);
    assert_eq!(k("double_blocks_4_txt_attn_qkv").as_deref(), Some("transformer_blocks.4.attn.add_qkv_proj"));
    assert_eq!(k("double_blocks_0_img_mlp_0").as_deref(), Some("transformer_blocks.0.ff.linear_in"));
    assert_eq!(k("single_blocks_7_linear2").as_deref(), Some("single_transformer_blocks.7.attn.to_out"));
    assert_eq!(k("time_in_in_layer").as_deref(), Some("time_guidance_embed.timestep_embedder.linear_1"));
    assert_eq!(
        place(&Flux2Keys, Format::Original, "diffusion_model.double_blocks.0.img_attn.norm.query_norm.scale.diff"),
        Ok(Place::Ignored)
    );
    assert_eq!(
        Flux2Keys.split("transformer_blocks.1.attn.add_qkv_proj"),
        Some(vec![
            "transformer_blocks.1.attn.add_q_proj".to_string(),
            "transformer_blocks.1.attn.add_k_proj".into(),
            "transformer_blocks.1.attn.add_v_proj".into()
        ])
    );
    assert_eq!(Flux2Keys.split("transformer_blocks.1.attn.to_q"), None);
    assert!(matches!(
        place(&Flux2Keys, Format::Original, "diffusion_model.img_in.lora_B.weight"),
        Ok(Place::Module(m, Part::Up)) if m == "x_embedder"
    ));
}

/// A fused `qkv` whose up matrix does not split in three, and a file giving `to_q` both fused
/// and on its own, are refused naming the key.
#[test]
fn broken_fused_modules_are_refused_naming_the_key() {
    let save = |tensors: Vec<(&str, Tensor)>| {
        let path = std::env::temp_dir().join(format!("flux2-lora-{}.safetensors", std::process::id()));
        Tensor::write_safetensors(&tensors, &path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).ok();
        LoraFile::parse(&bytes, &Flux2Keys)
    };
    let qkv = "diffusion_model.double_blocks.0.img_attn.qkv";
    let err = save(vec![
        (&format!("{qkv}.lora_A.weight"), Tensor::zeros([4, 32], (Kind::Float, Device::Cpu))),
        (&format!("{qkv}.lora_B.weight"), Tensor::zeros([95, 4], (Kind::Float, Device::Cpu))),
    ])
    .unwrap_err();
    assert_eq!(err.key.as_deref(), Some(format!("{qkv}.lora_B.weight").as_str()), "{err}");
    assert!(err.to_string().contains("3 equal parts"), "{err}");
    let q = "diffusion_model.transformer_blocks.0.attn.to_q";
    let err = save(vec![
        (&format!("{qkv}.lora_A.weight"), Tensor::zeros([4, 32], (Kind::Float, Device::Cpu))),
        (&format!("{qkv}.lora_B.weight"), Tensor::zeros([96, 4], (Kind::Float, Device::Cpu))),
        (&format!("{q}.lora_A.weight"), Tensor::zeros([4, 32], (Kind::Float, Device::Cpu))),
        (&format!("{q}.lora_B.weight"), Tensor::zeros([32, 4], (Kind::Float, Device::Cpu))),
    ])
    .unwrap_err();
    assert!(err.to_string().contains("both on its own and fused"), "{err}");
}
