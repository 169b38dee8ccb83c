//! The translator packs for pictures and videos, as plugins: ComfyUI's Wan 2.1 image-to-video
//! template compiles (core + Wan packs) to one image-to-video run whose request carries the
//! `LoadImage` file; first-and-last-frame, KJNodes' resize (its size outputs wired into the Wan
//! node) and video to video through `LoadVideo` lower as ComfyUI runs them; what the packs
//! cannot translate is refused naming the node.

use std::path::Path;

use crate::translators::{deploy, template};
use fastvideo_comfy::{compile, CompileError, Fit, Translators};
use fastvideo_request::{ImageRole, InputPart, TaskType};
use serde_json::{json, Value};

fn packs(stems: &[&str]) -> Translators {
    let names: Vec<(&str, &str)> = stems
        .iter()
        .map(|s| match *s {
            "core" => ("fastvideo_translator_comfy_core", "comfy-core"),
            "wan" => ("fastvideo_translator_comfy_wan", "comfy-wan"),
            _ => ("fastvideo_translator_comfy_kjnodes", "comfy-kjnodes"),
        })
        .collect();
    deploy(&names, "").translators().unwrap()
}

fn write_png(path: &Path, w: u32, h: u32) {
    image::RgbImage::from_fn(w, h, |x, _| image::Rgb([(x * 7) as u8, 100, 50])).save(path).unwrap();
}

#[test]
fn the_wan_image_to_video_template_compiles_to_a_request_carrying_the_picture() {
    let w = template("image_to_video_wan.json");
    let e = compile(&w, &packs(&["core"])).unwrap_err();
    assert_eq!(e, CompileError::Untranslated(vec![("50".into(), "WanImageToVideo".into())]));

    let c = compile(&w, &packs(&["core", "wan"])).unwrap();
    assert_eq!(c.runs.len(), 1);
    let r = &c.runs[0];
    assert_eq!((r.task, r.latent_node.as_str(), r.sampler_node.as_str()), (TaskType::I2v, "50", "3"));
    assert_eq!((r.width, r.height, r.frames, r.steps, r.fps), (Some(512), Some(512), Some(33), 20, Some(16.0)));
    assert!(r.prompt.starts_with("a cute anime girl"), "{}", r.prompt);
    assert!(
        r.negative.as_deref().unwrap_or("").starts_with("色调艳丽"),
        "the negative prompt through WanImageToVideo's second output"
    );
    assert_eq!(r.images.len(), 1);
    let image = &r.images[0];
    assert_eq!((image.role, image.node.as_str()), (ImageRole::FirstFrame, "52"));
    assert_eq!(image.file, "image_to_video_wan_start_image.png");
    let files: Vec<(&str, &str)> = r.files.iter().map(|f| (f.role, f.file.as_str())).collect();
    assert!(files.contains(&("clip_vision", "clip_vision_h.safetensors")), "{files:?}");
    assert!(files.contains(&("diffusion_model", "wan2.1_i2v_480p_14B_fp16.safetensors")), "{files:?}");

    // The request reads the picture from the input folder, cropped to the run's size.
    let inputs = tempfile::tempdir().unwrap();
    write_png(&inputs.path().join("image_to_video_wan_start_image.png"), 600, 400);
    let req = r.request("p1", inputs.path()).unwrap();
    assert_eq!(req.task, TaskType::I2v);
    let Some(InputPart::Image { b64: Some(b64), role: ImageRole::FirstFrame, .. }) =
        req.inputs.iter().find(|p| matches!(p, InputPart::Image { .. }))
    else {
        panic!("the request carries no first frame")
    };
    let bytes = fastvideo_request::image_bytes(None, Some(b64), "x").unwrap();
    let picture = fastvideo_request::decode_image(&bytes, ImageRole::FirstFrame, "x").unwrap();
    assert_eq!((picture.width, picture.height), (512, 512));
    // Without the file, the loader and its input are named.
    let e = r.request("p1", Path::new("/nonexistent")).unwrap_err().to_string();
    assert!(e.starts_with("node 52: image: Invalid image file: image_to_video_wan_start_image.png"), "{e}");
}

/// An API-format prompt: two pictures, two CLIP encodings, WanFirstLastFrameToVideo.
fn first_last_frame() -> Value {
    json!({
        "1": {"class_type": "UNETLoader", "inputs": {"unet_name": "flf2v.safetensors", "weight_dtype": "default"}},
        "2": {"class_type": "CLIPLoader", "inputs": {"clip_name": "umt5.safetensors", "type": "wan"}},
        "3": {"class_type": "VAELoader", "inputs": {"vae_name": "vae.safetensors"}},
        "4": {"class_type": "CLIPVisionLoader", "inputs": {"clip_name": "clip_vision_h.safetensors"}},
        "5": {"class_type": "LoadImage", "inputs": {"image": "first.png", "upload": "image"}},
        "6": {"class_type": "LoadImage", "inputs": {"image": "last.png", "upload": "image"}},
        "7": {"class_type": "CLIPVisionEncode", "inputs": {"clip_vision": ["4", 0], "image": ["5", 0], "crop": "none"}},
        "8": {"class_type": "CLIPVisionEncode", "inputs": {"clip_vision": ["4", 0], "image": ["6", 0], "crop": "none"}},
        "9": {"class_type": "CLIPTextEncode", "inputs": {"clip": ["2", 0], "text": "a flower opens"}},
        "10": {"class_type": "CLIPTextEncode", "inputs": {"clip": ["2", 0], "text": ""}},
        "11": {"class_type": "WanFirstLastFrameToVideo", "inputs": {
            "positive": ["9", 0], "negative": ["10", 0], "vae": ["3", 0], "width": 64, "height": 32, "length": 17,
            "batch_size": 1, "clip_vision_start_image": ["7", 0], "clip_vision_end_image": ["8", 0],
            "start_image": ["5", 0], "end_image": ["6", 0]}},
        "12": {"class_type": "KSampler", "inputs": {"model": ["1", 0], "positive": ["11", 0], "negative": ["11", 1],
            "latent_image": ["11", 2], "seed": 3, "steps": 4, "cfg": 5.0, "sampler_name": "euler", "scheduler": "simple", "denoise": 1.0}},
        "13": {"class_type": "VAEDecode", "inputs": {"samples": ["12", 0], "vae": ["3", 0]}},
        "14": {"class_type": "CreateVideo", "inputs": {"images": ["13", 0], "fps": 16}},
        "15": {"class_type": "SaveVideo", "inputs": {"video": ["14", 0], "filename_prefix": "video/flf", "format": "auto", "codec": "auto"}},
    })
}

#[test]
fn first_and_last_frames_and_kjnodes_resizes_lower_as_comfyui_runs_them() {
    let t = packs(&["core", "wan", "kj"]);
    let c = compile(&json!({ "prompt": first_last_frame() }), &t).unwrap();
    let r = &c.runs[0];
    let roles: Vec<(ImageRole, &str)> = r.images.iter().map(|i| (i.role, i.node.as_str())).collect();
    assert_eq!(roles, [(ImageRole::FirstFrame, "5"), (ImageRole::LastFrame, "6")]);

    // KJNodes' resize between the loader and the Wan node, its size outputs wired into it.
    let mut p = first_last_frame();
    p["20"] = json!({"class_type": "ImageResizeKJv2", "inputs": {"image": ["5", 0], "width": 100, "height": 50,
        "upscale_method": "lanczos", "keep_proportion": "crop", "pad_color": "0, 0, 0", "crop_position": "top", "divisible_by": 16}});
    p["11"]["inputs"]["start_image"] = json!(["20", 0]);
    p["11"]["inputs"]["width"] = json!(["20", 1]);
    p["11"]["inputs"]["height"] = json!(["20", 2]);
    let c = compile(&json!({ "prompt": p }), &t).unwrap();
    let r = &c.runs[0];
    assert_eq!((r.width, r.height), (Some(96), Some(48)), "KJNodes' outputs, rounded down to 16");
    let steps = &r.images[0].resize;
    assert_eq!((steps.len(), steps[0].node.as_str(), steps[0].fit), (2, "20", Fit::Crop));
    assert_eq!((steps[0].width, steps[1].node.as_str()), (100, "11"), "then the Wan node's own crop");

    // Padding is refused by the KJNodes translator, naming the node.
    p["20"]["inputs"]["keep_proportion"] = json!("pad");
    let e = compile(&json!({ "prompt": p }), &t).unwrap_err().to_string();
    assert!(e.starts_with("node 20 (ImageResizeKJv2): translator `comfy-kjnodes`: keep_proportion `pad`"), "{e}");
    // Sized from the picture, its size outputs are not literals the Wan node can read.
    p["20"]["inputs"]["keep_proportion"] = json!("resize");
    let e = compile(&json!({ "prompt": p }), &t).unwrap_err().to_string();
    assert!(e.starts_with("node 11: reads output ") && e.contains(" of node 20, which nothing produces"), "{e}");
}

#[test]
fn video_to_video_reads_loadvideo_and_maps_denoise_to_strength() {
    let mut p = first_last_frame();
    for k in ["4", "5", "6", "7", "8", "11"] {
        p.as_object_mut().unwrap().remove(k);
    }
    p["30"] = json!({"class_type": "LoadVideo", "inputs": {"file": "clip.mp4", "upload": "image"}});
    p["31"] = json!({"class_type": "GetVideoComponents", "inputs": {"video": ["30", 0]}});
    p["32"] = json!({"class_type": "ImageScale", "inputs": {"image": ["31", 0], "upscale_method": "bilinear",
        "width": 64, "height": 32, "crop": "disabled"}});
    p["33"] = json!({"class_type": "VAEEncode", "inputs": {"pixels": ["32", 0], "vae": ["3", 0]}});
    p["12"]["inputs"]["positive"] = json!(["9", 0]);
    p["12"]["inputs"]["negative"] = json!(["10", 0]);
    p["12"]["inputs"]["latent_image"] = json!(["33", 0]);
    p["12"]["inputs"]["denoise"] = json!(0.5);
    p["14"]["inputs"]["fps"] = json!(["31", 2]);
    p["14"]["inputs"]["audio"] = json!(["31", 1]);
    let c = compile(&json!({ "prompt": p }), &packs(&["core", "wan"])).unwrap();
    let r = &c.runs[0];
    assert_eq!((r.task, r.latent_node.as_str(), r.size_node.as_str()), (TaskType::V2v, "33", "32"));
    assert_eq!((r.steps, (r.steps as f64 * r.strength.unwrap()).floor()), (8, 4.0));
    assert!(r.fps_from_video);
    let v = r.video.as_ref().unwrap();
    assert_eq!((v.node.as_str(), v.file.as_str(), v.resize[0].fit), ("30", "clip.mp4", Fit::Stretch));
    // Denoising an empty latent partially is still refused.
    let mut p2 = p.clone();
    p2["12"]["inputs"]["latent_image"] = json!(["40", 0]);
    p2["40"] = json!({"class_type": "EmptyHunyuanLatentVideo", "inputs": {"width": 64, "height": 32, "length": 17, "batch_size": 1}});
    let e = compile(&json!({ "prompt": p2 }), &packs(&["core", "wan"])).unwrap_err().to_string();
    assert!(e.starts_with("node 12: denoise 0.5: below 1 needs a latent from VAEEncode of a video"), "{e}");
}
