//! The formats are this crate's and the names a family's: the same original-format and kohya
//! files read through a made-up family's key map (FLUX-like names), and another family's keys
//! refused naming the key and the family.

use fastvideo_lora::{Format, KeyMap, LoraFile};
use safetensors::tensor::TensorView;
use safetensors::Dtype;

/// A toy family: `double_blocks.N.img_attn.qkv` is its model's `transformer_blocks.N.attn.to_qkv`;
/// its `img_norm` is a norm.
struct Toy;

impl KeyMap for Toy {
    fn family(&self) -> &str {
        "Toy"
    }
    fn original(&self, module: &str) -> Option<String> {
        let (i, rest) = module.strip_prefix("double_blocks.")?.split_once('.')?;
        i.parse::<u32>().ok()?;
        (rest == "img_attn.qkv").then(|| format!("transformer_blocks.{i}.attn.to_qkv"))
    }
    fn kohya(&self, module: &str) -> Option<String> {
        let (i, rest) = module.strip_prefix("double_blocks_")?.split_once('_')?;
        i.parse::<u32>().ok()?;
        (rest == "img_attn_qkv").then(|| format!("transformer_blocks.{i}.attn.to_qkv"))
    }
    fn not_linear(&self, module: &str) -> bool {
        module.contains("norm")
    }
}

/// A safetensors file of f32 tensors: `(key, shape)`, zeros except alphas, which are 2.
fn file(tensors: &[(&str, Vec<usize>)]) -> Vec<u8> {
    let data: Vec<Vec<u8>> = tensors
        .iter()
        .map(|(k, s)| {
            let v = if k.ends_with(".alpha") { 2.0f32 } else { 0.0 };
            (0..s.iter().product::<usize>()).flat_map(|_| v.to_le_bytes()).collect()
        })
        .collect();
    let views = tensors
        .iter()
        .zip(&data)
        .map(|((k, s), d)| (k.to_string(), TensorView::new(Dtype::F32, s.clone(), d).unwrap()));
    safetensors::tensor::serialize(views, None).unwrap()
}

/// A rank-4 pair with alpha 2 for `module` (in the file's spelling, prefix included), and a norm
/// difference.
fn pair(module: &str, sep: char, norm: &str) -> Vec<u8> {
    file(&[
        (&format!("{module}{sep}lora_down.weight"), vec![4, 8]),
        (&format!("{module}{sep}lora_up.weight"), vec![6, 4]),
        (&format!("{module}{sep}alpha"), vec![]),
        (norm, vec![8]),
    ])
}

#[test]
fn a_second_family_reads_the_same_formats_through_its_own_names() {
    for (format, bytes) in [
        (
            Format::Original,
            pair("diffusion_model.double_blocks.3.img_attn.qkv", '.', "diffusion_model.double_blocks.3.img_norm.diff"),
        ),
        (Format::Kohya, pair("lora_unet_double_blocks_3_img_attn_qkv", '.', "lora_unet_double_blocks_3_img_norm.diff")),
    ] {
        assert_eq!(LoraFile::check_format(&bytes).unwrap(), format);
        let f = LoraFile::parse(&bytes, &Toy).unwrap();
        assert_eq!(f.format, format);
        assert_eq!(f.modules.keys().collect::<Vec<_>>(), ["transformer_blocks.3.attn.to_qkv"]);
        let patch = &f.modules["transformer_blocks.3.attn.to_qkv"];
        assert_eq!((patch.rank(), patch.scale()), (Some(4), 0.5));
        assert_eq!(f.ignored.len(), 1, "the norm difference is left out and counted");
    }
}

#[test]
fn another_familys_key_is_refused_naming_the_key_and_the_family() {
    let wan = "diffusion_model.blocks.0.self_attn.q.lora_down.weight";
    let bytes = file(&[(wan, vec![4, 8]), ("diffusion_model.blocks.0.self_attn.q.lora_up.weight", vec![8, 4])]);
    // The format alone has nothing against it: a deploy's early check lets it through.
    assert_eq!(LoraFile::check_format(&bytes).unwrap(), Format::Original);
    let e = LoraFile::parse(&bytes, &Toy).unwrap_err();
    assert_eq!(e.key.as_deref(), Some(wan));
    assert!(e.message.contains("names no module LoRA can target") && e.message.contains("Toy"), "{e}");
}

#[test]
fn the_format_check_refuses_what_no_family_could_read() {
    let bytes = file(&[("diffusion_model.double_blocks.0.img_attn.qkv.weight", vec![4, 8])]);
    let e = LoraFile::check_format(&bytes).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("diffusion_model.double_blocks.0.img_attn.qkv.weight"));
    assert!(LoraFile::parse(&bytes, &Toy).is_err());
    let kohya_text = file(&[("lora_unet_double_blocks_0_img_attn_qkv.alpha", vec![]), ("lora_te1_x.alpha", vec![])]);
    assert!(LoraFile::check_format(&kohya_text).unwrap_err().message.contains("kohya text-encoder"));
}
