//! ComfyUI fixtures: the pinned template corpus, a deploy enabling the core translator pack
//! with the Wan template's model files served by the default model, and that template at a
//! size the default model serves.

use std::path::{Path, PathBuf};

pub fn corpus() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.comfy-corpus/0.1.123/templates");
    assert!(dir.is_dir(), "no template corpus at {}: run `bash host/scripts/comfy-corpus.sh`", dir.display());
    dir
}

/// `comfyui.toml` in `dir`: the core pack (built once, [`super::plugins`]), pinned by hash, and
/// `[workflows.models]` mapping the Wan template's files to `default`.
pub fn deploy(dir: &Path) -> PathBuf {
    let core = &super::plugins()["fastvideo_translator_comfy_core"];
    let hash = blake3::hash(&std::fs::read(core).unwrap()).to_hex().to_string();
    let mut toml = format!(
        "[[plugins]]\nname = \"comfy-core\"\nsource = \"{}\"\nblake3 = \"{hash}\"\n\n[workflows.models]\n",
        core.display()
    );
    for f in ["wan2.1_t2v_1.3B_fp16.safetensors", "umt5_xxl_fp8_e4m3fn_scaled.safetensors", "wan_2.1_vae.safetensors"] {
        toml += &format!("\"{f}\" = \"default\"\n");
    }
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

/// (width, height, frames) of an MP4.
pub fn mp4_shape(bytes: &[u8]) -> (u16, u16, u32) {
    let mp4 = mp4::Mp4Reader::read_header(std::io::Cursor::new(bytes), bytes.len() as u64).unwrap();
    let track = mp4.tracks().values().next().unwrap();
    (track.width(), track.height(), track.sample_count())
}
