//! Qwen-Image-Edit-Plus's conditioning against diffusers + transformers on the tiny edit folder
//! (fixtures: make_qwenimage_fixtures.py, with the fix of diffusers #14194 applied: the vision
//! tokens' 3-D positions).

use fastvideo_qwen::vision::processor::{patchify, ProcessorConfig};
use fastvideo_qwenimage::edit::{EditEncoder, EditKind};
use fastvideo_qwenimage::prompt::PromptEncoder;
use fastvideo_request::{ImageRole, InputImage};
use tch::{Device, Kind, Tensor};

use crate::common::{fixture, load, rel};

pub fn pictures() -> Vec<InputImage> {
    ["edit0.png", "edit1.png"]
        .map(|n| {
            let bytes = std::fs::read(fixture(&format!("qwenimage/{n}"))).unwrap();
            fastvideo_request::decode_image(&bytes, ImageRole::Reference, n).unwrap()
        })
        .into()
}

fn encoder() -> (EditEncoder, PromptEncoder) {
    let dir = fixture("tiny-qwenimage-edit");
    let edit = EditEncoder::load(
        EditKind::EditPlus,
        &dir.join("text_encoder"),
        &dir.join("processor"),
        Device::Cpu,
        Kind::Float,
    )
    .unwrap();
    let prompt =
        PromptEncoder::load(&dir.join("text_encoder"), &dir.join("tokenizer"), Device::Cpu, Kind::Float).unwrap();
    (edit, prompt)
}

/// The processor's patches (a bicubic antialiased resize to multiples of 28, CLIP
/// normalisation): float32 rounding of the resize.
#[test]
fn processor_matches_transformers() {
    let f = load("qwenimage/edit_plus.safetensors");
    let (edit, _) = encoder();
    let pics = pictures();
    let (rgb, w, h) = edit.condition_picture(&pics[0]);
    let cfg = ProcessorConfig::load(&fixture("tiny-qwenimage-edit/processor")).unwrap();
    let p = patchify(&cfg, &rgb, h, w, Device::Cpu);
    let grids: Vec<i64> = Vec::try_from(f["grids"].reshape([-1])).unwrap();
    assert_eq!([1, p.grid.0, p.grid.1], grids[..3]);
    let e = rel(&p.pixels.narrow(0, 0, 64), &f["patches_head"]);
    assert!(e < 1e-5, "patches: {e:.2e}");
}

/// Expanded ids and 3-D positions exactly; the vision tower's tokens and the prompt's
/// embeddings to float32 rounding.
#[test]
fn edit_prompt_matches_transformers_with_3d_positions() {
    let f = load("qwenimage/edit_plus.safetensors");
    let (edit, prompt) = encoder();
    let pics = pictures();
    let refs: Vec<&InputImage> = pics.iter().collect();
    let ids = prompt.tokenizer().encode(&edit.text("a red fox jumps over the lazy dog", 2)).unwrap();
    let tokens = edit.pictures(&refs, Device::Cpu);
    let (ids, positions) = edit.prompt_inputs(&ids, &tokens, Device::Cpu).unwrap();
    let features = &tokens.features;
    assert_eq!(ids, Vec::<i64>::try_from(&f["ids"]).unwrap(), "ids");
    assert_eq!(
        Vec::<i64>::try_from(positions.reshape([-1])).unwrap(),
        Vec::<i64>::try_from(f["positions"].reshape([-1])).unwrap(),
        "3-D positions"
    );
    let e = rel(features, &f["image_embeds"]);
    assert!(e < 1e-5, "vision tokens: {e:.2e}");
    for (key, text) in [("embeds", "a red fox jumps over the lazy dog"), ("neg_embeds", "blurry, low quality")] {
        let e = rel(&prompt.encode_edit(&edit, text, &tokens).unwrap(), &f[key]);
        assert!(e < 1e-5, "{key}: {e:.2e}");
    }
}

/// The pictures at a megapixel through the VAE, normalised and packed.
#[test]
fn reference_latents_match_diffusers() {
    let f = load("qwenimage/edit_plus.safetensors");
    let vae = fastvideo_qwenimage::model::load_vae(&fixture("tiny-qwenimage/vae"), Device::Cpu, Kind::Float).unwrap();
    let refs: Vec<Tensor> = pictures()
        .iter()
        .map(|p| fastvideo_qwenimage::edit::reference_latents(&vae, p, Device::Cpu).unwrap().0)
        .collect();
    let e = rel(&Tensor::cat(&refs, 0), &f["ref_latents"]);
    assert!(e < 1e-5, "reference latents: {e:.2e}");
}

/// The whole edit: both pictures through both paths, true CFG, 2 steps; the picture within half
/// an 8-bit step plus 1e-3 (float32 both sides).
#[test]
fn edit_plus_matches_diffusers_end_to_end() {
    let f = load("qwenimage/edit_plus.safetensors");
    let m = fastvideo_qwenimage::model::QwenImageModel::load(
        &fixture("tiny-qwenimage-edit"),
        None,
        Device::Cpu,
        (Kind::Float, Kind::Float, Kind::Float),
    )
    .unwrap();
    assert_eq!(m.tasks(), [fastvideo_request::TaskType::I2i]);
    let mut r = crate::pipeline::request("edit", &f["latents"], Some("blurry, low quality"));
    r.task = fastvideo_request::TaskType::I2i;
    r.diffusion.num_inference_steps = Some(2);
    for n in ["edit0.png", "edit1.png"] {
        let path = fixture(&format!("qwenimage/{n}")).display().to_string();
        r.inputs.push(fastvideo_request::InputPart::Image { path: Some(path), b64: None, role: ImageRole::Reference });
    }
    let req = r.resolve(&m.limits(), || 0).unwrap();
    let (out, _) = crate::pipeline::run(&m, req);
    let e = crate::pipeline::picture_error(&out, &f["image"]);
    eprintln!("edit picture: {e:.2e}");
    assert!(e < 0.5 / 255.0 + 1e-3, "edit picture: {e:.2e}");
}
