//! `fastvideo generate --image/--last-image` as a user runs it on the tiny image-to-video and
//! first-and-last-frame folders: a video comes out, and every bad picture or wrong model gives one
//! clear line naming the flag or field, before any generation work.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use fastvideo_procedural::{analyze, psnr, render, Clip, Motion, Scene, Variation};

use crate::common::assert_user_error;

fn fastvideo(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fastvideo")).args(args).env("RUST_BACKTRACE", "1").output().expect("binary runs")
}

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name).display().to_string()
}

/// A `w`x`h` PNG with a green square on red.
fn write_png(path: &Path, w: u32, h: u32) {
    save_png(path, &picture_rgb(w, h), w, h);
}

/// The RGB8 pixels of [`write_png`]'s picture.
fn picture_rgb(w: u32, h: u32) -> Vec<u8> {
    let mut rgb = vec![0u8; (w * h * 3) as usize];
    for (i, px) in rgb.chunks_mut(3).enumerate() {
        let (x, y) = (i as u32 % w, i as u32 / w);
        px.copy_from_slice(if x < w / 2 && y < h / 2 { &[0, 255, 0] } else { &[200, 0, 0] });
    }
    rgb
}

fn save_png(path: &Path, rgb: &[u8], w: u32, h: u32) {
    let file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut enc = png::Encoder::new(file, w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.write_header().unwrap().write_image_data(rgb).unwrap();
}

fn generate(model: &str, extra: &[&str], out: &Path) -> Output {
    let mut args = vec!["generate", "--model", model, "--prompt", "a red circle moving left"];
    args.extend(["--height", "32", "--width", "32", "--frames", "9", "--steps", "2", "--quiet", "--json"]);
    args.extend(["--out", out.to_str().unwrap()]);
    args.extend(extra);
    fastvideo(&args)
}

struct Pictures {
    _dir: tempfile::TempDir,
    start: PathBuf,
    end: PathBuf,
    out: PathBuf,
}

fn pictures() -> Pictures {
    let dir = tempfile::tempdir().unwrap();
    let (start, end, out) = (dir.path().join("start.png"), dir.path().join("end.png"), dir.path().join("v.mp4"));
    write_png(&start, 56, 40);
    write_png(&end, 40, 40);
    Pictures { _dir: dir, start, end, out }
}

#[test]
fn image_and_first_last_frame_models_generate_from_pictures() {
    let p = pictures();
    let r = generate(&fixture("tiny-wan-i2v"), &["--image", p.start.to_str().unwrap()], &p.out);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let json: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    let nodes: Vec<&str> =
        json["metrics"]["node_seconds"].as_array().unwrap().iter().map(|n| n[0].as_str().unwrap()).collect();
    assert!(nodes.contains(&"image_encode"), "the image-to-video graph ran: {nodes:?}");
    assert!(std::fs::metadata(&p.out).unwrap().len() > 0);
    let flf2v = fixture("tiny-wan-flf2v");
    let r = generate(&flf2v, &["--image", p.start.to_str().unwrap(), "--last-image", p.end.to_str().unwrap()], &p.out);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
}

/// `--resize-mode crop` (pad) of the 56x40 picture generates exactly what stretching its centre
/// 40x40 (the picture on black bars, 56x56) does: the fitting happens before anything else sees
/// the picture, CLIP included. Stretch, the default, differs from both.
#[test]
fn resize_modes_crop_or_pad_the_picture_before_the_model() {
    let p = pictures();
    let (w, h) = (56u32, 40u32);
    let rgb = picture_rgb(w, h);
    let cropped: Vec<u8> =
        (0..h).flat_map(|y| rgb[((y * w + 8) * 3) as usize..((y * w + 48) * 3) as usize].to_vec()).collect();
    let mut padded = vec![0u8; (w * w * 3) as usize];
    padded[(8 * w * 3) as usize..(48 * w * 3) as usize].copy_from_slice(&rgb);
    let (crop_png, pad_png) = (p.out.with_file_name("crop.png"), p.out.with_file_name("pad.png"));
    save_png(&crop_png, &cropped, 40, 40);
    save_png(&pad_png, &padded, w, w);
    let model = fixture("tiny-wan-i2v");
    let run = |image: &Path, mode: Option<&str>, name: &str| {
        let out = p.out.with_file_name(name);
        let mut extra = vec!["--image", image.to_str().unwrap(), "--seed", "1"];
        if let Some(m) = mode {
            extra.extend(["--resize-mode", m]);
        }
        let r = generate(&model, &extra, &out);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        std::fs::read(out).unwrap()
    };
    let stretched = run(&p.start, None, "stretch.mp4");
    assert_eq!(run(&p.start, Some("crop"), "a.mp4"), run(&crop_png, None, "b.mp4"));
    assert_eq!(run(&p.start, Some("pad"), "c.mp4"), run(&pad_png, None, "d.mp4"));
    assert_ne!(run(&p.start, Some("crop"), "e.mp4"), stretched);
    let r = generate(&model, &["--image", p.start.to_str().unwrap(), "--resize-mode", "fit"], &p.out);
    assert_user_error(&r, "--resize-mode");
    let r = generate(&fixture("tiny-wan"), &["--resize-mode", "crop"], &p.out);
    assert_user_error(&r, "diffusion.resize_mode");
}

#[test]
fn bad_pictures_and_wrong_models_name_the_problem() {
    let p = pictures();
    let not_image = p.out.with_file_name("notes.png");
    std::fs::write(&not_image, "hello").unwrap();
    let i2v = fixture("tiny-wan-i2v");
    assert_user_error(&generate(&i2v, &["--image", not_image.to_str().unwrap()], &p.out), "--image: not an image");
    assert_user_error(&generate(&i2v, &["--image", "/nonexistent.png"], &p.out), "--image: cannot read");
    assert_user_error(&generate(&i2v, &[], &p.out), "give the first frame with --image");
    let t2v = fixture("tiny-wan");
    assert_user_error(&generate(&t2v, &["--image", p.start.to_str().unwrap()], &p.out), "does not support `i2v`");
    let flf2v = fixture("tiny-wan-flf2v");
    assert_user_error(&generate(&flf2v, &["--image", p.start.to_str().unwrap()], &p.out), "needs a last_frame image");
    assert!(!p.out.exists(), "no video is written for a refused request");
}

#[test]
fn video_to_video_runs_the_tail_of_the_schedule_on_an_mp4() {
    let p = pictures();
    let t2v = fixture("tiny-wan");
    let source = p.out.with_file_name("source.mp4");
    let r = generate(&t2v, &[], &source);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let src = source.to_str().unwrap();
    let r = generate(&t2v, &["--video", src, "--strength", "0.5"], &p.out);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let json: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    // 2 steps at strength 0.5: the last one runs, with CFG's two forwards.
    assert_eq!(json["metrics"]["forwards"], 2, "{json}");
    assert_eq!(json["artifacts"]["video"]["num_frames"], 9, "every usable frame of the input");
    assert_user_error(&generate(&t2v, &["--video", src, "--strength", "1.5"], &p.out), "diffusion.strength");
    assert_user_error(&generate(&t2v, &["--video", src, "--strength", "0.4"], &p.out), "runs no step");
    let png = p.start.to_str().unwrap();
    assert_user_error(&generate(&t2v, &["--video", png], &p.out), "--video: not a readable MP4");
    let i2v = fixture("tiny-wan-i2v");
    assert_user_error(&generate(&i2v, &["--video", src], &p.out), "does not support `v2v`");
}

/// The first frame of a held-out scene (a combination the model never saw), as a PNG file.
fn scene_picture(path: &Path) -> (Scene, Vec<u8>) {
    let scene = Scene::all().into_iter().find(|s| s.held_out() && s.motion == Motion::Right).unwrap();
    let clip = render(&scene, &Variation::sample(11), 17, 64);
    let rgb = clip.frame(0).to_vec();
    let file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut enc = png::Encoder::new(file, 64, 64);
    enc.set_color(png::ColorType::Rgb);
    enc.write_header().unwrap().write_image_data(&rgb).unwrap();
    (scene, rgb)
}

/// The acceptance run: the official client uploads a picture to a server running the shipped
/// image-to-video model, and the downloaded video starts from that picture. Measured: first
/// frame 32.8 dB after the VAE and H.264. For scale, on the training clips: the same scene with
/// its object where the clip ends scores 16-20 dB against the first frame, another scene 1-7 dB.
/// Floor: 25 dB.
#[test]
fn the_official_openai_client_uploads_an_input_reference() {
    let p = pictures();
    let (scene, picture) = scene_picture(&p.start);
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/default-i2v");
    let server = crate::common::server::Server::start(&["--model", model.to_str().unwrap()]);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/clients/openai_image_to_video.py");
    let out = Command::new(crate::common::client_python())
        .arg(script)
        .arg(&server.base)
        .arg(&p.start)
        .arg(&p.out)
        .arg(scene.prompt())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["status"], "completed", "{r}");
    let mp4 = std::fs::read(&p.out).unwrap();
    assert_eq!(mp4.len() as u64, r["mp4_bytes"].as_u64().unwrap());
    let video = fastvideo_request::decode_video(&mp4, "video").unwrap();
    assert_eq!((video.frames, video.width, video.height), (17, 64, 64));
    let first = psnr(&video.rgb[..picture.len()], &picture);
    assert!(first >= 25.0, "first frame {first:.1} dB from the uploaded picture");
    // And the object moved as the prompt says (the picture alone does not say where).
    let clip = Clip { frames: 17, height: 64, width: 64, rgb: video.rgb.clone() };
    assert_eq!(analyze(&clip).motion, Some(scene.motion), "{}", scene.prompt());
    assert_eq!(r["bad_image"], serde_json::json!({"status": 400, "param": "input_reference"}));
    // Uploaded through /v1/files and named by id: the same video (same picture, same seed).
    assert!(r["file_id"].as_str().unwrap().starts_with("file-"), "{r}");
    assert_eq!((&r["by_id_status"], &r["by_id_same_video"]), (&"completed".into(), &true.into()), "{r}");
    let (status, v) =
        server.post("/v1/videos", serde_json::json!({"prompt": "a red circle", "input_reference": r["file_id"]}));
    assert_eq!((status, v["error"]["param"].as_str()), (400, Some("input_reference")), "deleted upload: {v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("no uploaded file"), "{v}");
    // JSON clients send a data URL; a text prompt alone is refused by an image-to-video model.
    use base64::Engine as _;
    let png = base64::engine::general_purpose::STANDARD.encode(std::fs::read(&p.start).unwrap());
    let body = serde_json::json!({"prompt": "a red circle", "num_frames": 9, "resize_mode": "pad",
        "num_inference_steps": 2, "input_reference": format!("data:image/png;base64,{png}")});
    let (status, v) = server.post("/v1/videos", body.clone());
    assert_eq!(status, 200, "{v}");
    let mut bad = body;
    bad["resize_mode"] = "fit".into();
    let (status, v) = server.post("/v1/videos", bad);
    assert_eq!(status, 400, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("resize_mode"), "{v}");
    let (status, v) = server.post("/v1/videos", serde_json::json!({"prompt": "a red circle"}));
    assert_eq!((status, v["error"]["param"].as_str()), (400, Some("task")), "{v}");
}

#[test]
fn the_server_takes_a_video_for_video_to_video() {
    let p = pictures();
    let source = p.out.with_file_name("source.mp4");
    assert!(generate(&fixture("tiny-wan"), &[], &source).status.success());
    use base64::Engine as _;
    let mp4 = base64::engine::general_purpose::STANDARD.encode(std::fs::read(&source).unwrap());
    let server = crate::common::server::Server::start(&[]);
    let body = serde_json::json!({"prompt": "a blue square", "size": "32x32", "num_inference_steps": 2,
        "strength": 0.5, "video": mp4});
    let (status, v) = server.post("/v1/videos", body);
    assert_eq!(status, 200, "{v}");
    let (status, v) = server.post("/v1/videos", serde_json::json!({"prompt": "x", "video": "bm90IGEgdmlkZW8="}));
    assert_eq!((status, v["error"]["param"].as_str()), (400, Some("video")), "{v}");
    let (status, v) = server.post("/v1/videos", serde_json::json!({"prompt": "x", "strength": 0.5}));
    assert_eq!((status, v["error"]["param"].as_str()), (400, Some("strength")), "{v}");
}

fn f32s(file: &Path, name: &str) -> Vec<f32> {
    let bytes = std::fs::read(file).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let t = st.tensor(name).unwrap();
    assert_eq!(t.dtype(), safetensors::Dtype::F32);
    t.data().chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

#[test]
fn bench_takes_a_forwards_inputs_under_diffusers_names() {
    // diffusers' WanTransformer3DModel.forward arguments in, the velocity out: compared with
    // diffusers' own output for them (make_i2v_fixtures.py).
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("velocity.safetensors");
    let inputs = fixture("i2v_forward_inputs.safetensors");
    let args = ["bench", "--model", &fixture("tiny-wan-i2v"), "--device", "cpu", "--inputs", &inputs];
    let r = fastvideo(&[&args[..], &["--outputs", out.to_str().unwrap(), "--frames", "9", "--height", "64"]].concat());
    assert_user_error(&r, "`hidden_states` has shape [1, 12, 3, 8, 8]");
    let shape = ["--frames", "9", "--height", "64", "--width", "64", "--runs", "1", "--vae-runs", "1", "--json"];
    let r = fastvideo(&[&args[..], &["--outputs", out.to_str().unwrap()], &shape[..]].concat());
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let report: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert!(report["image_encode_s"].as_f64().unwrap() > 0.0 && report["vae_encode_s"].as_f64().unwrap() > 0.0);
    // Memory per phase: every phase named; a CPU has no allocator peaks to read (view `driver`).
    let phases: Vec<&str> =
        report["phase_memory"].as_array().unwrap().iter().map(|p| p["phase"].as_str().unwrap()).collect();
    let tiny = ["tiny_decode", "tiny_decode_one_pass", "preview"];
    assert_eq!(phases, [&["forward", "cfg_step", "forward_batch2", "text_encode", "vae_decode"][..], &tiny].concat());
    assert_eq!(report["memory_view"], "driver");
    assert!(
        report["same_work_peak_allocated_bytes"].is_null()
            && report["phase_memory"][0]["peak_allocated_bytes"].is_null()
    );
    assert_eq!(report["tiny_decode_chunk_frames"], 2);
    let ours = f32s(&out, "velocity");
    let reference = f32s(Path::new(&fixture("wan_i2v.safetensors")), "transformer.out_i2v");
    assert_eq!(ours.len(), reference.len());
    let scale = reference.iter().fold(0f32, |m, v| m.max(v.abs()));
    let err = ours.iter().zip(&reference).fold(0f32, |m, (a, b)| m.max((a - b).abs())) / scale;
    assert!(err < 1e-4, "relative error {err}"); // tolerance 1e-4, as the transformer parity test
}

#[test]
fn generate_with_noise_reproduces_diffusers_end_to_end() {
    // diffusers' I2V pipeline on the tiny folder with `latents=` (make_i2v_fixtures.py), run
    // here from files alone: the picture and the noise. The final latents must match.
    let dir = tempfile::tempdir().unwrap();
    let (out, traj) = (dir.path().join("v.mp4"), dir.path().join("t.safetensors"));
    let args = [
        "generate",
        "--model",
        &fixture("tiny-wan-i2v"),
        "--prompt",
        "a red circle moving left on a white background",
        "--negative-prompt",
        "blurry low quality",
        "--image",
        &fixture("i2v_first_frame.png"),
        "--noise",
        &fixture("i2v_pipeline_noise.safetensors"),
        "--height",
        "32",
        "--width",
        "32",
        "--frames",
        "9",
        "--steps",
        "4",
        "--guidance",
        "5",
        "--quiet",
        "--out",
        out.to_str().unwrap(),
        "--trajectory-out",
        traj.to_str().unwrap(),
    ];
    let r = fastvideo(&args);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let ours = f32s(&traj, "latents");
    let reference = f32s(Path::new(&fixture("wan_i2v.safetensors")), "pipeline.i2v.latents_out");
    assert_eq!(ours.len(), reference.len());
    let scale = reference.iter().fold(0f32, |m, v| m.max(v.abs()));
    let err = ours.iter().zip(&reference).fold(0f32, |m, (a, b)| m.max((a - b).abs())) / scale;
    assert!(err < 1e-4, "relative error {err}"); // tolerance 1e-4, as the pipeline parity test
                                                 // A noise file of the wrong shape names the flag's input; one without `latents` the tensor.
    let wrong = fixture("i2v_forward_inputs.safetensors");
    let bad: Vec<&str> =
        args.iter().map(|a| if a.ends_with("noise.safetensors") { wrong.as_str() } else { a }).collect();
    assert_user_error(&fastvideo(&bad), "no tensor named `latents`");
}

/// `/v1/files` takes uploads past axum's 2 MB default (real pictures and input videos are
/// larger), gives them back byte for byte, lists them, and forgets them on DELETE.
#[test]
fn the_files_api_keeps_large_uploads_until_deleted() {
    let server = crate::common::server::Server::start(&["--model", &fixture("tiny-wan-i2v")]);
    let data: Vec<u8> = (0..3u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let boundary = "fastvideo-test-boundary";
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nvision\r\n--{boundary}\r\n\
         Content-Disposition: form-data; name=\"file\"; filename=\"big.bin\"\r\n\
         Content-Type: application/octet-stream\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(&data);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let r = ureq::post(&server.url("/v1/files"))
        .header("Content-Type", format!("multipart/form-data; boundary={boundary}"))
        .config()
        .http_status_as_error(false)
        .build()
        .send(&body[..])
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let f: serde_json::Value = r.into_body().read_json().unwrap();
    let id = f["id"].as_str().unwrap().to_string();
    assert_eq!(
        (f["bytes"].as_u64(), f["filename"].as_str(), f["purpose"].as_str()),
        (Some(3 << 20), Some("big.bin"), Some("vision"))
    );
    let (status, back) = server.bytes(&format!("/v1/files/{id}/content"));
    assert_eq!(status, 200);
    assert!(back == data, "content differs");
    let (_, list) = server.get("/v1/files");
    assert_eq!(list["data"][0]["id"], id.as_str(), "{list}");
    let r = ureq::delete(&server.url(&format!("/v1/files/{id}"))).call().unwrap();
    assert_eq!(r.into_body().read_json::<serde_json::Value>().unwrap()["deleted"], true);
    let (status, v) = server.get(&format!("/v1/files/{id}"));
    assert_eq!(status, 404, "{v}");
    // A form without a file is a 400 naming `file`.
    let r = ureq::post(&server.url("/v1/files"))
        .header("Content-Type", format!("multipart/form-data; boundary={boundary}"))
        .config()
        .http_status_as_error(false)
        .build()
        .send(format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nvision\r\n--{boundary}--\r\n"
        ))
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let v: serde_json::Value = r.into_body().read_json().unwrap();
    assert_eq!(v["error"]["param"], "file", "{v}");
}
