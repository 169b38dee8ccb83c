//! Pictures and videos in a workflow, lowered: the pipeline graphs the Wan and core translator
//! packs make for ComfyUI's image-to-video, first-and-last-frame and video-to-video nodes
//! become requests carrying the files of the input folder (cropped and resized as ComfyUI
//! does), and what cannot be lowered or read is refused naming the node and its input.

use std::path::Path;

use base64::Engine as _;
use fastvideo_comfy::{as_ref, plan, value_name, CompileError, GraphNode, PipelineGraph, WorkflowConfig};
use fastvideo_request::{ImageRole, InputPart, TaskType, VideoArtifact};
use serde_json::{json, Value};

use crate::common::{node, r};

/// ComfyUI's `image_to_video_wan` template as the packs translate it, at 32×16, 9 frames.
fn image_to_video() -> Vec<GraphNode> {
    vec![
        node("37", "load.diffusion_model", json!({"file": "wan2.1_i2v_480p_14B_fp16.safetensors"})),
        node("38", "load.text_encoder", json!({"file": "umt5_xxl_fp8_e4m3fn_scaled.safetensors"})),
        node("39", "load.vae", json!({"file": "wan_2.1_vae.safetensors"})),
        node("49", "load.clip_vision", json!({"file": "clip_vision_h.safetensors"})),
        node("52", "load.image", json!({"file": "start.png"})),
        node("6", "encode.text", json!({"text": "a cat turns around", "text_encoder": r("38", 0)})),
        node("7", "encode.text", json!({"text": "blurry", "text_encoder": r("38", 0)})),
        node("51", "encode.clip_vision", json!({"clip_vision": r("49", 0), "images": r("52", 0), "crop": "none"})),
        node(
            "50",
            "condition.image_to_video",
            json!({"positive": r("6", 0), "negative": r("7", 0), "vae": r("39", 0), "clip_vision": r("51", 0),
                   "start_image": r("52", 0), "width": 32, "height": 16, "frames": 9, "batch": 1}),
        ),
        sampler(r("50", 0), r("50", 1), r("50", 2), 1.0),
        node("8", "decode.vae", json!({"latent": r("3", 0), "vae": r("39", 0)})),
        node("55", "video.create", json!({"images": r("8", 0), "fps": 16})),
        node("56", "output.video", json!({"video": r("55", 0), "prefix": "video/ComfyUI"})),
    ]
}

fn sampler(positive: Value, negative: Value, latent: Value, denoise: f64) -> GraphNode {
    node(
        "3",
        "sample",
        json!({"model": r("37", 0), "positive": positive, "negative": negative, "latent": latent, "seed": 5,
               "steps": 4, "cfg": 6.0, "sampler": "uni_pc", "scheduler": "simple", "denoise": denoise}),
    )
}

fn replace(nodes: &mut [GraphNode], n: GraphNode) {
    let slot = nodes.iter_mut().find(|m| m.name == n.name).unwrap();
    *slot = n;
}

fn lower(nodes: Vec<GraphNode>) -> Result<fastvideo_comfy::RunPlan, CompileError> {
    let mut runs = plan(&PipelineGraph::build(nodes)?)?;
    assert_eq!(runs.len(), 1);
    Ok(runs.remove(0))
}

/// A `w`×`h` PNG: red rows in the middle half, green above and below.
fn write_png(path: &Path, w: u32, h: u32) {
    let img = image::RgbImage::from_fn(w, h, |_, y| {
        if y >= h / 4 && y < 3 * h / 4 {
            image::Rgb([220, 0, 0])
        } else {
            image::Rgb([0, 200, 0])
        }
    });
    img.save(path).unwrap();
}

/// The picture an image input carries.
fn picture(part: &InputPart) -> (ImageRole, image::RgbImage) {
    let InputPart::Image { b64: Some(b64), path: None, role } = part else { panic!("not an inline image: {part:?}") };
    let bytes = base64::engine::general_purpose::STANDARD.decode(b64).unwrap();
    (*role, image::load_from_memory(&bytes).unwrap().to_rgb8())
}

#[test]
fn image_to_video_lowers_to_a_request_carrying_the_cropped_picture() {
    let inputs = tempfile::tempdir().unwrap();
    write_png(&inputs.path().join("start.png"), 40, 40);
    let run = lower(image_to_video()).unwrap();
    assert_eq!((run.task, run.latent_node.as_str(), run.size_node.as_str()), (TaskType::I2v, "50", "50"));
    assert_eq!((run.width, run.height, run.frames), (Some(32), Some(16), Some(9)));
    assert_eq!((run.prompt.as_str(), run.negative.as_deref()), ("a cat turns around", Some("blurry")));
    let roles: Vec<(&str, &str)> = run.files.iter().map(|f| (f.role, f.node.as_str())).collect();
    assert!(roles.contains(&("clip_vision", "49")) && roles.contains(&("vae", "39")), "{roles:?}");
    assert_eq!(run.images.len(), 1);
    assert_eq!((run.images[0].node.as_str(), run.images[0].file.as_str()), ("52", "start.png"));
    assert_eq!(run.images[0].resize.len(), 1, "WanImageToVideo's own center crop");

    let req = run.request("r1", inputs.path()).unwrap();
    assert_eq!(req.task, TaskType::I2v);
    let images: Vec<_> = req.inputs.iter().filter(|p| matches!(p, InputPart::Image { .. })).map(picture).collect();
    assert_eq!(images.len(), 1);
    let (role, img) = &images[0];
    assert_eq!((*role, img.width(), img.height()), (ImageRole::FirstFrame, 32, 16));
    // The 40×40 picture is cut to its middle 40×20 (the red band, rows 10..30) before scaling:
    // a stretch would have kept green at the top and bottom.
    assert!(
        img.pixels().all(|p| p.0[0] > 150 && p.0[1] < 60),
        "only the red middle is left: {:?}",
        img.get_pixel(0, 0)
    );
    let resolved = req.resolve(&wan_i2v_limits(), || 0).unwrap();
    assert_eq!((resolved.images.len(), resolved.num_frames, resolved.width), (1, 9, 32), "the request resolves");
}

fn wan_i2v_limits() -> fastvideo_request::ModelLimits {
    fastvideo_request::ModelLimits { tasks: vec![TaskType::I2v], ..fastvideo_request::ModelLimits::example() }
}

#[test]
fn first_and_last_frame_pictures_take_their_roles() {
    let inputs = tempfile::tempdir().unwrap();
    write_png(&inputs.path().join("start.png"), 32, 16);
    write_png(&inputs.path().join("end.png"), 64, 32);
    let mut g = image_to_video();
    g.push(node("53", "load.image", json!({"file": "end.png"})));
    g.push(node("54", "encode.clip_vision", json!({"clip_vision": r("49", 0), "images": r("53", 0), "crop": "none"})));
    let mut flf = g.iter().find(|n| n.name == "50").unwrap().clone();
    flf.params["end_image"] = r("53", 0);
    flf.params["clip_vision_end"] = r("54", 0);
    flf.inputs.extend([value_name("53", 0), value_name("54", 0)]);
    replace(&mut g, flf.clone());
    let run = lower(g.clone()).unwrap();
    let req = run.request("r1", inputs.path()).unwrap();
    let roles: Vec<_> =
        req.inputs.iter().filter(|p| matches!(p, InputPart::Image { .. })).map(|p| picture(p).0).collect();
    assert_eq!(roles, [ImageRole::FirstFrame, ImageRole::LastFrame]);

    // A CLIP embedding of another picture than the one the video ends on.
    replace(&mut g, node("54", "encode.clip_vision", json!({"clip_vision": r("49", 0), "images": r("52", 0)})));
    let e = lower(g.clone()).unwrap_err().to_string();
    assert!(e.starts_with("node 54: encodes node 52's picture, but node 50's end_image is node 53's"), "{e}");

    // The end without the start.
    flf.params["start_image"] = Value::Null;
    flf.params["clip_vision"] = Value::Null;
    flf.inputs.retain(|i| i != &value_name("52", 0) && i != &value_name("51", 0));
    g.retain(|n| n.name != "51");
    replace(&mut g, node("54", "encode.clip_vision", json!({"clip_vision": r("49", 0), "images": r("53", 0)})));
    replace(&mut g, flf);
    let e = lower(g).unwrap_err().to_string();
    assert!(e.starts_with("node 50: `end_image` without `start_image`"), "{e}");
}

#[test]
fn bad_picture_files_name_the_loader_and_its_input() {
    let inputs = tempfile::tempdir().unwrap();
    let run = lower(image_to_video()).unwrap();
    let input_of = |e: CompileError| match e {
        CompileError::Input { node, input, message } => (node, input, message),
        other => panic!("not an input error: {other}"),
    };
    let (at, input, msg) = input_of(run.request("r1", inputs.path()).unwrap_err());
    assert_eq!((at.as_str(), input.as_str()), ("52", "image"));
    assert!(msg.starts_with("Invalid image file: start.png (not in the input folder"), "{msg}");

    std::fs::write(inputs.path().join("start.png"), "not a picture").unwrap();
    let (_, _, msg) = input_of(run.request("r1", inputs.path()).unwrap_err());
    assert!(msg.contains("start.png: not an image"), "{msg}");

    let mut g = image_to_video();
    replace(&mut g, node("52", "load.image", json!({"file": "../../etc/passwd"})));
    let (at, _, msg) = input_of(lower(g).unwrap().request("r1", inputs.path()).unwrap_err());
    assert!(at == "52" && msg.contains("not a file name inside the input folder"), "{msg}");
}

#[test]
fn what_cannot_be_lowered_is_refused_by_node() {
    // Conditioning through the image-to-video node, latent from an empty one.
    let mut g = image_to_video();
    g.push(node("40", "latent.empty", json!({"width": 32, "height": 16, "frames": 9, "batch": 1})));
    replace(&mut g, sampler(r("50", 0), r("50", 1), r("40", 0), 1.0));
    let e = lower(g).unwrap_err().to_string();
    assert!(
        e.starts_with("node 3: its conditioning comes from image-to-video node 50 but its latent from node 40"),
        "{e}"
    );

    // Partial denoising of an image-to-video latent.
    let mut g = image_to_video();
    replace(&mut g, sampler(r("50", 0), r("50", 1), r("50", 2), 0.6));
    let e = lower(g).unwrap_err().to_string();
    assert!(e.starts_with("node 3: denoise 0.6: below 1 needs a latent from VAEEncode of a video"), "{e}");

    // VAEEncode of a picture (image to image).
    let mut g = image_to_video();
    g.push(node("60", "encode.vae", json!({"images": r("52", 0), "vae": r("39", 0)})));
    replace(&mut g, sampler(r("6", 0), r("7", 0), r("60", 0), 0.6));
    let e = lower(g).unwrap_err().to_string();
    assert!(e.starts_with("node 60: encodes node 52's picture: image to image is not supported"), "{e}");

    // A batch of two.
    let mut g = image_to_video();
    let mut i2v = g.iter().find(|n| n.name == "50").unwrap().clone();
    i2v.params["batch"] = json!(2);
    replace(&mut g, i2v);
    assert_eq!(lower(g).unwrap_err().to_string(), "node 50: batch_size 2: one video per request; set 1");
}

/// A 48×32, 9-frame MP4 at 12 fps.
fn write_mp4(path: &Path) {
    let (w, h, n) = (48u32, 32u32, 9u32);
    let rgb = (0..n * h * w).flat_map(|i| [(i % 251) as u8, 90, 30]).collect();
    let video = VideoArtifact { fps: 12, num_frames: n, height: h, width: w, rgb };
    std::fs::write(path, fastvideo_media::mp4_bytes(&video).unwrap()).unwrap();
}

/// A video-to-video graph: LoadVideo → GetVideoComponents → ImageScale (height 16, width
/// following) → VAEEncode → KSampler, the output at the video's frame rate.
fn video_to_video(denoise: f64, fit: &str) -> Vec<GraphNode> {
    let mut g = image_to_video();
    g.retain(|n| !["49", "50", "51", "52"].contains(&n.name.as_str()));
    g.extend([
        node("70", "load.video", json!({"file": "clip.mp4"})),
        node("71", "video.components", json!({"video": r("70", 0)})),
        node(
            "72",
            "image.resize",
            json!({"images": r("71", 0), "width": 0, "height": 16, "method": "bilinear", "fit": fit}),
        ),
        node("73", "encode.vae", json!({"images": r("72", 0), "vae": r("39", 0)})),
    ]);
    replace(&mut g, sampler(r("6", 0), r("7", 0), r("73", 0), denoise));
    replace(&mut g, node("55", "video.create", json!({"images": r("8", 0), "fps": r("71", 2)})));
    g
}

#[test]
fn video_to_video_maps_denoise_to_strength_and_takes_the_videos_size_and_rate() {
    let inputs = tempfile::tempdir().unwrap();
    write_mp4(&inputs.path().join("clip.mp4"));
    let run = lower(video_to_video(0.5, "stretch")).unwrap();
    assert_eq!((run.task, run.latent_node.as_str(), run.size_node.as_str()), (TaskType::V2v, "73", "72"));
    // ComfyUI: 4 steps at denoise 0.5 are the last 4 of an 8-step schedule.
    let s = run.strength.unwrap();
    assert_eq!((run.steps, (8.0 * s).floor() as u32), (8, 4), "strength {s}");
    assert!(run.fps_from_video && run.video.as_ref().unwrap().node == "70");
    let req = run.request("r1", inputs.path()).unwrap();
    let d = &req.diffusion;
    assert_eq!(
        (d.width, d.height, d.fps, d.num_frames),
        (Some(24), Some(16), Some(12), None),
        "48×32 scaled to height 16"
    );
    assert!(req.inputs.iter().any(|p| matches!(p, InputPart::Video { b64: Some(_), .. })));
    let limits = fastvideo_request::ModelLimits {
        tasks: vec![TaskType::V2v],
        picture: Some(fastvideo_request::PictureLimits { spatial_multiple: 8, max_side: 1024 }),
        ..fastvideo_request::ModelLimits::example()
    };
    let resolved = req.resolve(&limits, || 0).unwrap();
    assert_eq!((resolved.start_step(), resolved.num_frames, resolved.video.unwrap().frames), (4, 9, 9));

    // denoise 0.7 of 20 steps: int(20 / 0.7) = 28 steps, the last 20 of which run.
    let mut g = video_to_video(0.7, "stretch");
    let mut s20 = g.iter().find(|n| n.name == "3").unwrap().clone();
    s20.params["steps"] = json!(20);
    replace(&mut g, s20);
    let run = lower(g).unwrap();
    assert_eq!((run.steps, (28.0 * run.strength.unwrap()).floor() as u32), (28, 20));

    // A KSamplerAdvanced starting at step 3 of 4 runs the last step.
    let mut g = video_to_video(1.0, "stretch");
    let mut adv = g.iter().find(|n| n.name == "3").unwrap().clone();
    adv.params["start_step"] = json!(3);
    replace(&mut g, adv);
    let run = lower(g).unwrap();
    assert_eq!((run.steps, (4.0 * run.strength.unwrap()).floor() as u32), (4, 1));

    // Cutting the frames to another aspect is refused at the resize node.
    let mut g = video_to_video(0.5, "crop");
    let mut square = g.iter().find(|n| n.name == "72").unwrap().clone();
    square.params["width"] = json!(16);
    replace(&mut g, square);
    let e = lower(g).unwrap().request("r1", inputs.path()).unwrap_err().to_string();
    assert!(e.starts_with("node 72: cropping the video's 48x32 frames to another aspect is not supported"), "{e}");
    // A missing video names the loader's `file`.
    std::fs::remove_file(inputs.path().join("clip.mp4")).unwrap();
    let e = lower(video_to_video(0.5, "stretch")).unwrap().request("r1", inputs.path()).unwrap_err();
    assert!(e.to_string().starts_with("node 70: file: Invalid video file: clip.mp4"), "{e}");
}

#[test]
fn a_model_file_several_folders_share_goes_with_the_diffusion_models_folder() {
    let run = lower(image_to_video()).unwrap();
    let cfg: WorkflowConfig = serde_json::from_value(json!({"models": {
        "wan2.1_i2v_480p_14B_fp16.safetensors": "default-i2v",
        "umt5_xxl_fp8_e4m3fn_scaled.safetensors": ["default", "default-i2v"],
        "wan_2.1_vae.safetensors": ["default", "default-i2v"],
        "clip_vision_h.safetensors": "default-i2v",
    }}))
    .unwrap();
    assert_eq!(cfg.folders_for(&run).unwrap(), ["default-i2v"]);
    let cfg: WorkflowConfig = serde_json::from_value(json!({"models": {
        "wan2.1_i2v_480p_14B_fp16.safetensors": "default-i2v",
        "umt5_xxl_fp8_e4m3fn_scaled.safetensors": ["default"],
        "wan_2.1_vae.safetensors": "default-i2v",
        "clip_vision_h.safetensors": "default-i2v",
    }}))
    .unwrap();
    let e = cfg.folders_for(&run).unwrap_err().to_string();
    assert!(
        e.contains("`umt5_xxl_fp8_e4m3fn_scaled.safetensors` maps to default, but node 37's file maps to default-i2v"),
        "{e}"
    );
}

#[test]
fn lora_loaders_stack_onto_the_request_in_the_order_applied() {
    let mut nodes = image_to_video();
    // UNET -> LoraLoaderModelOnly (a) -> LoraLoader (b, also given the text encoder) -> sampler;
    // the prompt's text encoder comes through LoraLoader's CLIP output.
    nodes.push(node(
        "60",
        "model.lora_model",
        json!({"model": r("37", 0), "file": "loras/a.safetensors", "strength": 0.7}),
    ));
    nodes.push(node(
        "61",
        "model.lora",
        json!({"model": r("60", 0), "text_encoder": r("38", 0), "file": "b.safetensors", "strength": -0.25}),
    ));
    replace(&mut nodes, node("6", "encode.text", json!({"text": "a cat turns around", "text_encoder": r("61", 1)})));
    let mut s = sampler(r("50", 0), r("50", 1), r("50", 2), 1.0);
    s.params["model"] = r("61", 0);
    s.inputs = s.params.as_object().unwrap().values().filter_map(as_ref).map(String::from).collect();
    replace(&mut nodes, s);
    let plan = lower(nodes).unwrap();
    let got: Vec<(&str, &str, f64)> =
        plan.loras.iter().map(|l| (l.node.as_str(), l.file.as_str(), l.strength)).collect();
    assert_eq!(got, [("60", "loras/a.safetensors", 0.7), ("61", "b.safetensors", -0.25)]);
    assert_eq!(plan.prompt, "a cat turns around", "the text encoder passes through the LoraLoader");
    assert_eq!(plan.node_of("lora[1].name"), "61", "a request error about lora[1] names its loader");
    let dir = tempfile::tempdir().unwrap();
    write_png(&dir.path().join("start.png"), 40, 20);
    let req = plan.request("p", dir.path()).unwrap();
    let lora: Vec<(String, Option<f64>)> = req.lora.iter().map(|c| (c.name.clone(), c.scale)).collect();
    assert_eq!(lora, [("loras/a.safetensors".to_string(), Some(0.7)), ("b.safetensors".to_string(), Some(-0.25))]);
}
