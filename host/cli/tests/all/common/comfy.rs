//! ComfyUI fixtures: the pinned template corpus, a deploy enabling the core translator pack
//! with the Wan template's model files served by the default model, and that template at a
//! size the default model serves.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tungstenite::stream::MaybeTlsStream;
use tungstenite::{Message, WebSocket};

use super::server::Server;

pub fn corpus() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.comfy-corpus/0.1.123/templates");
    assert!(dir.is_dir(), "no template corpus at {}: run `bash host/scripts/comfy-corpus.sh`", dir.display());
    dir
}

/// `comfyui.toml` in `dir`: the core pack (built once, [`super::plugins`]), pinned by hash, and
/// `[workflows.models]` mapping the Wan template's files to `default`.
pub fn deploy(dir: &Path) -> PathBuf {
    let mut models = String::new();
    for f in ["wan2.1_t2v_1.3B_fp16.safetensors", "umt5_xxl_fp8_e4m3fn_scaled.safetensors", "wan_2.1_vae.safetensors"] {
        models += &format!("\"{f}\" = \"default\"\n");
    }
    deploy_with(dir, &[("fastvideo_translator_comfy_core", "comfy-core")], &models)
}

/// `comfyui.toml` in `dir` enabling the translator `packs` (crate file stem, name), each pinned
/// by hash, with `models` as the lines of its `[workflows.models]`.
pub fn deploy_with(dir: &Path, packs: &[(&str, &str)], models: &str) -> PathBuf {
    let mut toml = String::new();
    for (stem, name) in packs {
        let wasm = &super::plugins()[*stem];
        let hash = blake3::hash(&std::fs::read(wasm).unwrap()).to_hex().to_string();
        toml += &format!("[[plugins]]\nname = \"{name}\"\nsource = \"{}\"\nblake3 = \"{hash}\"\n\n", wasm.display());
    }
    toml += "[workflows.models]\n";
    toml += models;
    let p = dir.join("comfyui.toml");
    std::fs::write(&p, toml).unwrap();
    p
}

/// ComfyUI's `text_to_video_wan` (UI format) at 64×64, 17 frames, `steps` steps.
pub fn small_wan(steps: u32) -> serde_json::Value {
    let mut w: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(corpus().join("text_to_video_wan.json")).unwrap()).unwrap();
    for n in w["nodes"].as_array_mut().unwrap() {
        match n["type"].as_str().unwrap() {
            "EmptyHunyuanLatentVideo" => n["widgets_values"] = serde_json::json!([64, 64, 17, 1]),
            "KSampler" => n["widgets_values"][2] = serde_json::json!(steps),
            _ => {}
        }
    }
    w
}

/// `small_wan` written to `dir`.
pub fn small_wan_file(dir: &Path, steps: u32) -> PathBuf {
    let p = dir.join("wan_small.json");
    std::fs::write(&p, small_wan(steps).to_string()).unwrap();
    p
}

/// The image-to-video model folder ComfyUI's Wan 2.1 image-to-video template runs on in these
/// tests (the shipped `models/default-i2v`), the (width, height, frames) it runs at, and the
/// first-frame PSNR (dB against the uploaded picture) its output must reach.
pub struct I2vModel {
    pub dir: PathBuf,
    pub size: (u32, u32, u32),
    pub steps: u32,
    pub psnr_floor: Option<f64>,
}

pub fn i2v_model() -> I2vModel {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/default-i2v");
    // Measured: 33 dB (the template's shift 8 and CFG 6); floor well under that and over the
    // 16-20 dB of the same scene with its object moved.
    I2vModel { dir: dir.canonicalize().unwrap(), size: (64, 64, 17), steps: 20, psnr_floor: Some(25.0) }
}

/// `[workflows.models]` lines for the Wan 2.1 templates: the image-to-video files to `i2v`, the
/// text-to-video file to `default`, and the text encoder and VAE they share to both.
pub fn i2v_models(i2v: &Path) -> String {
    let i2v = i2v.display();
    format!(
        "\"wan2.1_i2v_480p_14B_fp16.safetensors\" = \"{i2v}\"\n\"clip_vision_h.safetensors\" = \"{i2v}\"\n\
         \"wan2.1_t2v_1.3B_fp16.safetensors\" = \"default\"\n\
         \"umt5_xxl_fp8_e4m3fn_scaled.safetensors\" = [\"default\", \"{i2v}\"]\n\
         \"wan_2.1_vae.safetensors\" = [\"default\", \"{i2v}\"]\n"
    )
}

/// ComfyUI's `image_to_video_wan` (UI format) for `model` (its size and steps), its
/// `LoadImage` naming `image` and its prompt `prompt`.
pub fn small_i2v(model: &I2vModel, image: &str, prompt: &str) -> Value {
    let ((w, h, frames), steps) = (model.size, model.steps);
    let mut wf: Value =
        serde_json::from_str(&std::fs::read_to_string(corpus().join("image_to_video_wan.json")).unwrap()).unwrap();
    for n in wf["nodes"].as_array_mut().unwrap() {
        match n["type"].as_str().unwrap() {
            "WanImageToVideo" => n["widgets_values"] = serde_json::json!([w, h, frames, 1]),
            "KSampler" => n["widgets_values"][2] = serde_json::json!(steps),
            "LoadImage" => n["widgets_values"][0] = serde_json::json!(image),
            "CLIPTextEncode" if n["id"] == 6 => n["widgets_values"][0] = serde_json::json!(prompt),
            // The template's negative prompt is Chinese: words the default model's 28-word
            // tokenizer reads as unknown, which it never saw as the unconditional branch (it was
            // trained with ""), and CFG away from them spoils the first frame (18 dB against 33).
            "CLIPTextEncode" if n["id"] == 7 => n["widgets_values"][0] = serde_json::json!(""),
            _ => {}
        }
    }
    wf
}

/// A deploy's `[[adapters]]` entry `name` serving `file`, pinned by its hash.
pub fn adapter(name: &str, file: &Path) -> String {
    let hash = blake3::hash(&std::fs::read(file).unwrap()).to_hex().to_string();
    format!("[[adapters]]\nname = \"{name}\"\nsource = \"{}\"\nblake3 = \"{hash}\"\n\n", file.display())
}

/// Posts `prompt` (as `id`) to `/prompt`, waits for it, and returns the bytes of its first
/// output file from `/view`.
pub fn output_of(s: &Server, prompt: &Value, id: &str) -> Vec<u8> {
    let mut ws = connect(s, id);
    let (code, r) = s.post("/prompt", serde_json::json!({"prompt": prompt, "client_id": id, "prompt_id": id}));
    assert_eq!(code, 200, "{r}");
    let seen = until_done(&mut ws, id);
    let executed = seen.iter().find(|m| m["type"] == "executed").unwrap_or_else(|| panic!("{seen:?}"));
    let f = &executed["data"]["output"]["images"][0];
    let url = format!(
        "/view?filename={}&subfolder={}&type=output",
        f["filename"].as_str().unwrap(),
        f["subfolder"].as_str().unwrap()
    );
    let (code, bytes) = s.bytes(&url);
    assert_eq!(code, 200);
    bytes
}

/// `workflow` in ComfyUI's API format, as `fastvideo workflow parse` writes it.
pub fn to_api(dir: &Path, workflow: &Value) -> Value {
    let file = dir.join("to_api.json");
    std::fs::write(&file, workflow.to_string()).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fastvideo"))
        .args(["workflow", "parse"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The first frame of procedural `scene` (what the default models are trained on) as a
/// `size`×`size` PNG.
pub fn scene_png(scene: &fastvideo_procedural::Scene, size: usize) -> Vec<u8> {
    let clip = fastvideo_procedural::render(scene, &fastvideo_procedural::Variation::canonical(), 1, size);
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, size as u32, size as u32);
    enc.set_color(png::ColorType::Rgb);
    enc.write_header().unwrap().write_image_data(clip.frame(0)).unwrap();
    out
}

/// Runs `workflow` (UI format) with ComfyUI's own command line (comfy-cli, installed by
/// `host/scripts/comfy-client.sh`) against `s`; its JSON envelope, checked to be `ok`.
pub fn comfy_cli_run(s: &Server, workflow: &Path, scratch: &Path) -> Value {
    let port = s.base.rsplit(':').next().unwrap().to_string();
    let comfy_bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv-comfy/bin/comfy");
    assert!(comfy_bin.exists(), "no comfy-cli at {}: run `bash host/scripts/comfy-client.sh`", comfy_bin.display());
    let home = scratch.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let out = std::process::Command::new(&comfy_bin)
        .args(["--skip-prompt", "--json", "run", "--workflow"])
        .arg(workflow)
        .args(["--host", "127.0.0.1", "--port", &port, "--wait", "--timeout", "120"])
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("DO_NOT_TRACK", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "comfy run failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let envelope: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(envelope["ok"], true, "{envelope}");
    envelope
}

/// (width, height, frames) of an MP4.
pub fn mp4_shape(bytes: &[u8]) -> (u16, u16, u32) {
    let mp4 = mp4::Mp4Reader::read_header(std::io::Cursor::new(bytes), bytes.len() as u64).unwrap();
    let track = mp4.tracks().values().next().unwrap();
    (track.width(), track.height(), track.sample_count())
}

pub type Ws = WebSocket<MaybeTlsStream<TcpStream>>;

pub fn connect(s: &Server, client_id: &str) -> Ws {
    let url = format!("{}/ws?clientId={client_id}", s.base.replace("http://", "ws://"));
    let (mut ws, _) = tungstenite::connect(url).unwrap();
    if let MaybeTlsStream::Plain(t) = ws.get_mut() {
        t.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    }
    ws
}

/// The next message; a binary frame comes as `{"type": "binary", "data": {"event", "format",
/// "jpeg"}}`: its two big-endian header words, and whether the rest is a JPEG.
pub fn next(ws: &mut Ws) -> Value {
    loop {
        match ws.read().unwrap() {
            Message::Text(t) => return serde_json::from_str(&t).unwrap(),
            Message::Binary(b) if b.len() > 8 => {
                let word = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
                let jpeg = b[8..].starts_with(&[0xFF, 0xD8]) && b.ends_with(&[0xFF, 0xD9]);
                return serde_json::json!({"type": "binary", "data": {"event": word(0), "format": word(4), "jpeg": jpeg}});
            }
            Message::Binary(_) | Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => {}
            Message::Close(_) => panic!("server closed the socket"),
        }
    }
}

/// Reads messages until `executing` with `node: null` for `prompt_id`, as ComfyUI's example
/// client does.
pub fn until_done(ws: &mut Ws, prompt_id: &str) -> Vec<Value> {
    let mut seen = Vec::new();
    loop {
        let m = next(ws);
        let done = m["type"] == "executing" && m["data"]["node"].is_null() && m["data"]["prompt_id"] == prompt_id;
        seen.push(m);
        if done {
            return seen;
        }
    }
}

/// A multipart body with one file field and plain fields.
pub fn multipart(file: (&str, &[u8]), fields: &[(&str, &str)]) -> (String, Vec<u8>) {
    let b = "fastvideo-boundary";
    let mut body = Vec::new();
    for (k, v) in fields {
        body.extend(format!("--{b}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n").as_bytes());
    }
    body.extend(format!("--{b}\r\nContent-Disposition: form-data; name=\"image\"; filename=\"{}\"\r\nContent-Type: image/png\r\n\r\n", file.0).as_bytes());
    body.extend(file.1);
    body.extend(format!("\r\n--{b}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={b}"), body)
}

pub fn upload(s: &Server, file: (&str, &[u8]), fields: &[(&str, &str)]) -> Value {
    let (ct, body) = multipart(file, fields);
    ureq::post(&s.url("/upload/image"))
        .header("Content-Type", &ct)
        .send(&body[..])
        .unwrap()
        .into_body()
        .read_json()
        .unwrap()
}
