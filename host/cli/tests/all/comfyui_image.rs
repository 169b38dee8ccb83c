//! ComfyUI's FLUX.2 [klein] and Qwen-Image text-to-image templates (from the pinned corpus)
//! through `fastvideo serve`'s `/prompt`, their model files mapped to the tiny folders, at a
//! small size and few steps: each makes the picture `fastvideo generate` makes with the
//! template's settings (seed, guidance, negative prompt, Qwen-Image's fixed shift 3.1 and its
//! Lightning LoRA through `LoraLoaderModelOnly`).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

use crate::common::comfy;
use crate::common::server::Server;

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(rel)
}

/// The API-format template, as `fastvideo workflow parse` writes it.
fn template(dir: &Path, name: &str) -> Value {
    let ui: Value = serde_json::from_str(&std::fs::read_to_string(comfy::corpus().join(name)).unwrap()).unwrap();
    comfy::to_api(dir, &ui)
}

/// The id of the (one) node of `class` in an API-format prompt.
fn node_of(prompt: &Value, class: &str) -> String {
    let mut ids = prompt.as_object().unwrap().iter().filter(|(_, n)| n["class_type"] == class).map(|(k, _)| k.clone());
    let id = ids.next().unwrap_or_else(|| panic!("no {class}"));
    assert!(ids.next().is_none(), "more than one {class}");
    id
}

/// Posts `prompt`, waits, and returns its picture (RGB8) from `/view`.
fn run(s: &Server, prompt: &Value, id: &str) -> Vec<u8> {
    image::load_from_memory(&comfy::output_of(s, prompt, id)).unwrap().to_rgb8().into_raw()
}

/// `fastvideo generate` alone with `args` (CPU, float32 as the server): its picture (RGB8).
fn generate(dir: &Path, model: &Path, args: &[&str]) -> Vec<u8> {
    let out = dir.join("alone.png");
    let r = Command::new(env!("CARGO_BIN_EXE_fastvideo"))
        .args(["generate", "--model", model.to_str().unwrap(), "--device", "cpu", "--out", out.to_str().unwrap()])
        .args(args)
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    image::open(&out).unwrap().to_rgb8().into_raw()
}

/// Largest difference of two RGB8 pictures, in 8-bit steps.
fn max_diff(a: &[u8], b: &[u8]) -> u8 {
    assert_eq!(a.len(), b.len(), "sizes differ");
    a.iter().zip(b).map(|(x, y)| x.abs_diff(*y)).max().unwrap_or(0)
}

fn serve(dir: &Path, packs: &[(&str, &str)], models: &str, adapters: &str, model: &Path) -> Server {
    let deploy = comfy::deploy_with(dir, packs, models);
    let text = format!("{adapters}{}", std::fs::read_to_string(&deploy).unwrap());
    std::fs::write(&deploy, text).unwrap();
    let files = dir.join("comfy");
    let (deploy, files) = (deploy.to_str().unwrap(), files.to_str().unwrap());
    Server::start(&["--deploy", deploy, "--comfy-dir", files, "--model", model.to_str().unwrap()])
}

const CORE: (&str, &str) = ("fastvideo_translator_comfy_core", "comfy-core");

#[test]
fn the_flux2_klein_text_to_image_template_runs_as_generate() {
    let dir = tempfile::tempdir().unwrap();
    let model = fixture("tiny-flux2-klein");
    let m = model.display();
    let files = format!(
        "\"flux-2-klein-base-4b.safetensors\" = \"{m}\"\n\"qwen_3_4b.safetensors\" = \"{m}\"\n\"flux2-vae.safetensors\" = \"{m}\"\n"
    );
    let s = serve(dir.path(), &[CORE, ("fastvideo_translator_comfy_flux2", "comfy-flux2")], &files, "", &model);
    let mut p = template(dir.path(), "image_flux2_klein_text_to_image.json");
    // The subgraph's width and height primitives feed both the latent and Flux2Scheduler.
    for (id, n) in p.as_object_mut().unwrap() {
        if n["class_type"] == "PrimitiveInt" && id.starts_with("75:") {
            n["inputs"]["value"] = json!(64);
        }
    }
    let sched = node_of(&p, "Flux2Scheduler");
    p[&sched]["inputs"]["steps"] = json!(4);
    let prompt = p[&node_of(&p, "PrimitiveStringMultiline")]["inputs"]["value"].as_str().unwrap().to_string();
    let served = run(&s, &p, "flux2");
    // CFGGuider cfg 5 against the empty prompt, RandomNoise seed 0.
    let alone = generate(
        dir.path(),
        &model,
        &["--prompt", &prompt, "--steps", "4", "--guidance", "5", "--height", "64", "--width", "64", "--seed", "0"],
    );
    assert_eq!(served.len(), 64 * 64 * 3);
    assert!(max_diff(&served, &alone) <= 1, "the template's picture is generate's");

    // Flux2Scheduler's size must be the latent's (the schedule shifts by it): refused naming it.
    let latent = node_of(&p, "EmptyFlux2LatentImage");
    p[&latent]["inputs"]["width"] = json!(128);
    let (code, r) = s.post("/prompt", json!({"prompt": p}));
    assert_eq!(code, 400, "{r}");
    assert!(r["node_errors"][&sched].to_string().contains("64×64 but the latent is 128×64"), "{r}");
}

#[test]
fn the_qwen_image_template_runs_as_generate_with_and_without_its_lightning_lora() {
    let dir = tempfile::tempdir().unwrap();
    let model = fixture("tiny-qwenimage");
    let m = model.display();
    let files = format!(
        "\"qwen_image_fp8_e4m3fn.safetensors\" = \"{m}\"\n\"qwen_2.5_vl_7b_fp8_scaled.safetensors\" = \"{m}\"\n\
         \"qwen_image_vae.safetensors\" = \"{m}\"\n"
    );
    // The template's LoRA file name, served by the deploy's adapter of that file.
    let lightning = dir.path().join("Qwen-Image-Lightning-8steps-V1.0.safetensors");
    std::fs::copy(fixture("image_lora/qwenimage_lightning.safetensors"), &lightning).unwrap();
    let adapters = comfy::adapter("lightning", &lightning);
    let s = serve(dir.path(), &[CORE], &files, &adapters, &model);
    let mut p = template(dir.path(), "image_qwen_image.json");
    let latent = node_of(&p, "EmptySD3LatentImage");
    p[&latent]["inputs"]["width"] = json!(64);
    p[&latent]["inputs"]["height"] = json!(64);
    let sampler = node_of(&p, "KSampler");
    let seed = p[&sampler]["inputs"]["seed"].as_u64().unwrap().to_string();
    let texts: Vec<String> = p
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, n)| n["class_type"] == "CLIPTextEncode")
        .map(|(k, _)| k.clone())
        .collect();
    let positive = p[&sampler]["inputs"]["positive"][0].as_str().unwrap().to_string();
    let negative = texts.iter().find(|k| **k != positive).unwrap().clone();
    p[&negative]["inputs"]["text"] = json!("blurry, low quality");
    let prompt = p[&positive]["inputs"]["text"].as_str().unwrap().to_string();
    let switch = node_of(&p, "PrimitiveBoolean");
    // The template's own steps (20 plain, 8 with the LoRA) cut to 3; cfg 4 plain, 1 with it.
    for n in p.as_object_mut().unwrap().values_mut() {
        if n["class_type"] == "PrimitiveInt" {
            n["inputs"]["value"] = json!(3);
        }
    }
    let common = ["--prompt", &prompt, "--steps", "3", "--height", "64", "--width", "64", "--seed", &seed, "--shift"];
    let plain = run(&s, &p, "plain");
    let mut args = common.to_vec();
    args.extend(["3.1", "--guidance", "4", "--negative-prompt", "blurry, low quality"]);
    assert!(max_diff(&plain, &generate(dir.path(), &model, &args)) <= 1, "plain: the template's picture is generate's");

    p[&switch]["inputs"]["value"] = json!(true);
    let styled = run(&s, &p, "lightning");
    let lora = format!("{}=1", lightning.display());
    let mut args = common.to_vec();
    args.extend(["3.1", "--guidance", "1", "--lora", &lora]);
    assert!(max_diff(&styled, &generate(dir.path(), &model, &args)) <= 1, "LoRA: the template's picture is generate's");
    assert!(max_diff(&styled, &plain) > 10);
}

/// ComfyUI's FLUX.2 [klein] edit template (a picture scaled to a pixel count, VAE-encoded into
/// `ReferenceLatent`, the output sized by `GetImageSize`, a zeroed-out negative at cfg 1) on an
/// uploaded picture: the picture `generate --image` makes.
#[test]
fn the_flux2_klein_edit_template_runs_as_generate() {
    let dir = tempfile::tempdir().unwrap();
    let model = fixture("tiny-flux2-klein");
    let m = model.display();
    let files = format!(
        "\"flux-2-klein-4b-fp8.safetensors\" = \"{m}\"\n\"qwen_3_4b.safetensors\" = \"{m}\"\n\"flux2-vae.safetensors\" = \"{m}\"\n"
    );
    let s = serve(dir.path(), &[CORE, ("fastvideo_translator_comfy_flux2", "comfy-flux2")], &files, "", &model);
    let mut p = template(dir.path(), "image_flux2_klein_image_edit_4b_distilled.json");
    let picture = std::fs::read(fixture("flux2/ref1.png")).unwrap();
    let load = p
        .as_object()
        .unwrap()
        .iter()
        .find(|(_, n)| n["class_type"] == "LoadImage" && n["inputs"]["image"] == "handbag_white.png");
    let name = load.unwrap().1["inputs"]["image"].as_str().unwrap().to_string();
    assert_eq!(comfy::upload(&s, (&name, &picture), &[])["name"], name.as_str());
    // The 64×64 picture kept at its size: 64² pixels is 1/256 of a megapixel.
    let scale = node_of(&p, "ImageScaleToTotalPixels");
    p[&scale]["inputs"]["megapixels"] = json!(64.0 * 64.0 / (1024.0 * 1024.0));
    let sampler = node_of(&p, "RandomNoise");
    let seed = p[&sampler]["inputs"]["noise_seed"].as_u64().unwrap().to_string();
    let text = node_of(&p, "CLIPTextEncode");
    let prompt = p[&text]["inputs"]["text"].as_str().unwrap().to_string();
    let served = run(&s, &p, "flux2-edit");
    let reference = fixture("flux2/ref1.png");
    let args =
        ["--prompt", &prompt, "--steps", "4", "--guidance", "1", "--seed", &seed, "--height", "64", "--width", "64"];
    let mut args = args.to_vec();
    args.extend(["--image", reference.to_str().unwrap()]);
    let alone = generate(dir.path(), &model, &args);
    assert_eq!(served.len(), 64 * 64 * 3);
    assert!(max_diff(&served, &alone) <= 1, "the template's picture is generate's");
}

/// ComfyUI's Qwen-Image-Edit template (`TextEncodeQwenImageEdit` with the picture on both
/// branches, the output the size of the VAE-encoded picture, `ModelSamplingAuraFlow` shift 3,
/// `CFGNorm`) on the tiny Edit-Plus folder: the picture `generate --image` makes.
#[test]
fn the_qwen_image_edit_template_runs_as_generate() {
    let dir = tempfile::tempdir().unwrap();
    let model = fixture("tiny-qwenimage-edit");
    let m = model.display();
    let files = format!(
        "\"qwen_image_edit_fp8_e4m3fn.safetensors\" = \"{m}\"\n\"qwen_2.5_vl_7b_fp8_scaled.safetensors\" = \"{m}\"\n\
         \"qwen_image_vae.safetensors\" = \"{m}\"\n"
    );
    let packs = [CORE, ("fastvideo_translator_comfy_qwenimage", "comfy-qwenimage")];
    let s = serve(dir.path(), &packs, &files, "", &model);
    let mut p = template(dir.path(), "image_qwen_image_edit.json");
    let load = node_of(&p, "LoadImage");
    let name = p[&load]["inputs"]["image"].as_str().unwrap().to_string();
    let picture = std::fs::read(fixture("qwenimage/edit1.png")).unwrap();
    assert_eq!(comfy::upload(&s, (&name, &picture), &[])["name"], name.as_str());
    let sampler = node_of(&p, "KSampler");
    let seed = p[&sampler]["inputs"]["seed"].as_u64().unwrap().to_string();
    let positive = p[&sampler]["inputs"]["positive"][0].as_str().unwrap().to_string();
    let negative = p[&sampler]["inputs"]["negative"][0].as_str().unwrap().to_string();
    p[&negative]["inputs"]["prompt"] = json!("blurry");
    let prompt = p[&positive]["inputs"]["prompt"].as_str().unwrap().to_string();
    for n in p.as_object_mut().unwrap().values_mut() {
        if n["class_type"] == "PrimitiveInt" {
            n["inputs"]["value"] = json!(3);
        }
    }
    let served = run(&s, &p, "qwen-edit");
    let reference = fixture("qwenimage/edit1.png");
    let args =
        ["--prompt", &prompt, "--negative-prompt", "blurry", "--steps", "3", "--guidance", "2.5", "--shift", "3"];
    let mut args = args.to_vec();
    args.extend(["--seed", &seed, "--height", "96", "--width", "64", "--image", reference.to_str().unwrap()]);
    let alone = generate(dir.path(), &model, &args);
    assert_eq!(served.len(), 64 * 96 * 3, "the output is the encoded picture's size");
    assert!(max_diff(&served, &alone) <= 1, "the template's picture is generate's");
}
