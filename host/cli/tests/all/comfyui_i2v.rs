//! ComfyUI's Wan 2.1 image-to-video template (`image_to_video_wan`, from the pinned corpus)
//! through `fastvideo serve`'s ComfyUI API, as a ComfyUI client runs it: the picture uploaded
//! with `/upload/image`, the template posted to `/prompt` with its model files mapped to an
//! image-to-video model folder, the video fetched from `/view`. A `LoadImage` naming a file the
//! input folder lacks is refused the way ComfyUI refuses it, naming the node and the input.

use std::path::Path;

use crate::common::comfy::{self, connect, i2v_model, until_done, upload};
use crate::common::server::Server;
use fastvideo_procedural::Scene;
use fastvideo_request::{decode_image, decode_video, ImageRole};
use serde_json::{json, Value};

/// PSNR (dB) of two RGB8 pictures of one size.
fn psnr(a: &[u8], b: &[u8]) -> f64 {
    assert_eq!(a.len(), b.len());
    let mse = a.iter().zip(b).map(|(&x, &y)| (x as f64 - y as f64).powi(2)).sum::<f64>() / a.len() as f64;
    10.0 * (255.0f64.powi(2) / mse.max(1e-12)).log10()
}

/// Posts `prompt` for `client`, waits for it, and returns the MP4 its `SaveVideo` (node 56) wrote.
/// A server for `model` with the core and Wan packs, the template's files mapped to `folder`.
fn serve(dir: &Path, model: &comfy::I2vModel, folder: &Path) -> Server {
    let packs = [("fastvideo_translator_comfy_core", "comfy-core"), ("fastvideo_translator_comfy_wan", "comfy-wan")];
    let deploy = comfy::deploy_with(dir, &packs, &comfy::i2v_models(folder));
    let files = dir.join("comfy");
    let (deploy, files, model) = (deploy.to_str().unwrap(), files.to_str().unwrap(), model.dir.to_str().unwrap());
    Server::start(&["--deploy", deploy, "--comfy-dir", files, "--model", model])
}

fn run(s: &Server, ws: &mut comfy::Ws, prompt: &Value, client: &str) -> Vec<u8> {
    let (code, r) = s.post("/prompt", json!({"prompt": prompt, "client_id": client}));
    assert_eq!(code, 200, "{r}");
    let id = r["prompt_id"].as_str().unwrap().to_string();
    let seen = until_done(ws, &id);
    assert!(seen.iter().any(|m| m["type"] == "execution_success"), "{seen:?}");
    let (_, h) = s.get(&format!("/history/{id}"));
    let file = &h[&id]["outputs"]["56"]["images"][0];
    let url = format!(
        "/view?filename={}&subfolder={}&type=output",
        file["filename"].as_str().unwrap(),
        file["subfolder"].as_str().unwrap()
    );
    let (code, bytes) = s.bytes(&url);
    assert_eq!(code, 200);
    bytes
}

#[test]
fn the_wan_image_to_video_template_runs_on_an_uploaded_picture() {
    let dir = tempfile::tempdir().unwrap();
    let model = i2v_model();
    let s = serve(dir.path(), &model, &model.dir);
    // Two held-out scenes of the procedural vocabulary the default models learn, as pictures
    // larger than the video (the template crops and scales them).
    let scenes: Vec<Scene> = Scene::all().into_iter().filter(Scene::held_out).collect();
    let (scene, other_scene) = (scenes[0], scenes[scenes.len() / 2]);
    let start = comfy::scene_png(&scene, 96);
    assert_eq!(upload(&s, ("start.png", &start), &[])["name"], "start.png");
    let other = comfy::scene_png(&other_scene, 96);
    assert_eq!(upload(&s, ("other.png", &other), &[])["name"], "other.png");
    let listed = s.get("/object_info/LoadImage").1["LoadImage"]["input"]["required"]["image"][1]["options"].clone();
    assert_eq!(listed, json!(["other.png", "start.png"]), "LoadImage lists the input folder's pictures");

    let prompt = comfy::to_api(dir.path(), &comfy::small_i2v(&model, "start.png", &scene.prompt()));
    assert_eq!(prompt["50"]["class_type"], "WanImageToVideo");
    assert_eq!(prompt["50"]["inputs"]["length"], model.size.2, "the Wan pack's schema named the widgets");
    let mut ws = connect(&s, "i2v");
    let first = run(&s, &mut ws, &prompt, "i2v");
    let (w, h, frames) = model.size;
    assert_eq!(comfy::mp4_shape(&first), (w as u16, h as u16, frames), "the requested size and frame count");

    // The picture conditions the video: another one changes it, the same one again repeats it
    // (the template's seed is fixed).
    let mut with_other = prompt.clone();
    with_other["52"]["inputs"]["image"] = json!("other.png");
    assert_ne!(run(&s, &mut ws, &with_other, "i2v"), first, "the uploaded picture reached the model");
    assert_eq!(run(&s, &mut ws, &prompt, "i2v"), first, "same picture, same seed, same video");

    // How close the first frame is to the picture (center-cropped to the video's size, as
    // ComfyUI's WanImageToVideo crops it).
    let video = decode_video(&first, "output").unwrap();
    let picture = decode_image(&start, ImageRole::FirstFrame, "start").unwrap();
    let expected = fastvideo_comfy::Resize::wan_crop("50", w, h).apply(&picture).unwrap();
    let db = psnr(&video.rgb[..(w * h * 3) as usize], &expected.rgb);
    eprintln!("first frame vs the uploaded picture: {db:.1} dB PSNR ({})", model.dir.display());
    if let Some(floor) = model.psnr_floor {
        assert!(db >= floor, "first-frame PSNR {db:.1} dB is below {floor} dB");
    }

    // A picture the input folder lacks: refused before anything is queued, naming the node
    // and its input as ComfyUI does.
    let mut missing = prompt.clone();
    missing["52"]["inputs"]["image"] = json!("missing.png");
    let (code, r) = s.post("/prompt", json!({"prompt": missing}));
    assert_eq!((code, r["error"]["type"].clone()), (400, json!("prompt_outputs_failed_validation")), "{r}");
    let e = &r["node_errors"]["52"];
    assert_eq!(e["class_type"], "LoadImage");
    assert_eq!(e["errors"][0]["type"], "custom_validation_failed");
    assert_eq!(e["errors"][0]["extra_info"]["input_name"], "image");
    let details = e["errors"][0]["details"].as_str().unwrap();
    assert!(details.starts_with("image - Invalid image file: missing.png"), "{details}");
    assert_eq!(e["dependent_outputs"], json!(["56"]));
    assert_eq!(s.get("/queue").1["queue_pending"], json!([]), "nothing refused was queued");

    // A file that is not a picture names the node too.
    upload(&s, ("notes.png", b"hello"), &[]);
    let mut bad = prompt;
    bad["52"]["inputs"]["image"] = json!("notes.png");
    let (code, r) = s.post("/prompt", json!({"prompt": bad}));
    let details = r["node_errors"]["52"]["errors"][0]["details"].as_str().unwrap_or_default().to_string();
    assert!(code == 400 && details.contains("notes.png: not an image"), "{r}");
}

/// A model folder whose `[workflows.models]` entry the server does not serve is refused.
#[test]
fn a_template_mapped_to_another_folder_is_refused_by_the_loader() {
    let dir = tempfile::tempdir().unwrap();
    let model = i2v_model();
    let s = serve(dir.path(), &model, Path::new("/elsewhere"));
    upload(&s, ("start.png", &comfy::scene_png(&Scene::all()[0], 32)), &[]);
    let prompt = comfy::to_api(dir.path(), &comfy::small_i2v(&model, "start.png", "a red circle"));
    let (code, r) = s.post("/prompt", json!({"prompt": prompt}));
    assert_eq!(code, 400, "{r}");
    let (node, e) = r["node_errors"].as_object().unwrap().iter().next().unwrap();
    assert!(e["errors"][0]["message"].as_str().unwrap().contains("which this server does not serve"), "{r}");
    assert_eq!(e["class_type"], "UNETLoader", "node {node}");
}

/// ComfyUI's own command line (`comfy run`, which converts the UI file with our
/// `/object_info`) runs the image-to-video template on an uploaded picture.
#[test]
fn comfy_cli_runs_the_image_to_video_template() {
    let dir = tempfile::tempdir().unwrap();
    let model = i2v_model();
    let s = serve(dir.path(), &model, &model.dir);
    let scene = Scene::all()[7];
    upload(&s, ("start.png", &comfy::scene_png(&scene, 64)), &[]);
    let workflow = dir.path().join("i2v.json");
    std::fs::write(&workflow, comfy::small_i2v(&model, "start.png", &scene.prompt()).to_string()).unwrap();
    let envelope = comfy::comfy_cli_run(&s, &workflow, dir.path());
    assert_eq!(envelope["data"]["status"], "completed", "{envelope}");
    let url = envelope["data"]["outputs_by_node"]["56"][0].as_str().unwrap();
    let bytes = ureq::get(url).call().unwrap().into_body().read_to_vec().unwrap();
    let (w, h, frames) = model.size;
    assert_eq!(comfy::mp4_shape(&bytes), (w as u16, h as u16, frames));
}
