//! ComfyUI's LTX-2.3 text-to-video template (from the pinned corpus: a subgraph of two
//! `SamplerCustomAdvanced` stages on ManualSigmas, the latent upsampler between them, the
//! distilled LoRA on both, the audio VAE decode into `CreateVideo`) through `fastvideo serve`'s
//! `/prompt`, its model files mapped to the tiny LTX-2 folder, at a small size: the MP4 it
//! writes carries H.264 and AAC and is the clip `fastvideo generate` makes with the template's
//! settings spelled out as flags. With its prompt enhancer on (an LLM rewrite this runtime
//! does not run) it is refused naming the node.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

use crate::common::comfy;
use crate::common::server::Server;

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(rel)
}

/// Ids of the nodes of `class` in an API-format prompt.
fn nodes_of(prompt: &Value, class: &str) -> Vec<String> {
    prompt.as_object().unwrap().iter().filter(|(_, n)| n["class_type"] == class).map(|(k, _)| k.clone()).collect()
}

/// The node an input links to.
fn link(prompt: &Value, node: &str, input: &str) -> String {
    prompt[node]["inputs"][input][0].as_str().unwrap_or_else(|| panic!("{node}.{input} is not a link")).to_string()
}

/// The clip's RGB frames and its 16-bit stereo samples, as ffmpeg decodes the MP4.
fn decode(mp4: &[u8], dir: &Path, name: &str) -> (Vec<u8>, Vec<u8>) {
    let file = dir.join(name);
    std::fs::write(&file, mp4).unwrap();
    let run = |args: &[&str]| {
        let out = Command::new("ffmpeg").args(["-v", "error", "-i"]).arg(&file).args(args).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    };
    (run(&["-f", "rawvideo", "-pix_fmt", "rgb24", "-"]), run(&["-vn", "-f", "s16le", "-"]))
}

/// The codec of each stream (`codec_type codec_name`) of an MP4.
fn streams(mp4: &[u8], dir: &Path) -> Vec<String> {
    let file = dir.join("probe.mp4");
    std::fs::write(&file, mp4).unwrap();
    let out = Command::new("ffprobe")
        .args(["-v", "error", "-show_entries", "stream=codec_type,codec_name", "-of", "csv=p=0"])
        .arg(&file)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
}

#[test]
fn the_ltx_2_3_text_to_video_template_runs_with_sound_as_generate() {
    let dir = tempfile::tempdir().unwrap();
    let model = fixture("tiny-ltx2");
    let m = model.display();
    let mut files = String::new();
    for f in [
        "ltx-2.3-22b-dev-fp8.safetensors",
        "gemma_3_12B_it_fp4_mixed.safetensors",
        "ltx-2.3-spatial-upscaler-x2-1.1.safetensors",
    ] {
        files += &format!("\"{f}\" = \"{m}\"\n");
    }
    // The template's distilled LoRA, served by the deploy's adapter of that file name.
    let lora = dir.path().join("ltx_2.3_22b_distilled_1.1_lora_dynamic_fro09_avg_rank_111_bf16.safetensors");
    std::fs::copy(fixture("ltx2_lora/pipeline_original.safetensors"), &lora).unwrap();
    let adapters = comfy::adapter("distilled", &lora);
    let packs = [("fastvideo_translator_comfy_core", "comfy-core"), ("fastvideo_translator_comfy_ltx2", "comfy-ltx2")];
    let deploy = comfy::deploy_with(dir.path(), &packs, &files);
    let text = format!("{adapters}{}", std::fs::read_to_string(&deploy).unwrap());
    std::fs::write(&deploy, text).unwrap();
    let comfy_dir = dir.path().join("comfy");
    let s = Server::start(&[
        "--deploy",
        deploy.to_str().unwrap(),
        "--comfy-dir",
        comfy_dir.to_str().unwrap(),
        "--model",
        model.to_str().unwrap(),
    ]);

    let ui: Value =
        serde_json::from_str(&std::fs::read_to_string(comfy::corpus().join("video_ltx2_3_t2v.json")).unwrap()).unwrap();
    let mut p = comfy::to_api(dir.path(), &ui);
    // As shipped, an LLM rewrites the prompt first: refused, naming the prompt's node.
    let (code, r) = s.post("/prompt", json!({ "prompt": p }));
    assert_eq!(code, 400, "{r}");
    let message = r["node_errors"].to_string();
    assert!(message.contains("prompt enhancer") && message.contains("switch the enhancer off"), "{r}");

    // The enhancer off; 1280×720, 5 s at 25 fps cut to 64×64 (the base at 32×32), 17 frames at 8 fps.
    let switch = nodes_of(&p, "ComfySwitchNode").pop().unwrap();
    let flag = link(&p, &switch, "switch");
    p[&flag]["inputs"]["value"] = json!(false);
    for n in nodes_of(&p, "PrimitiveInt") {
        let v = p[&n]["inputs"]["value"].as_i64().unwrap();
        let small = match v {
            1280 | 720 => 64,
            5 => 2,
            25 => 8,
            other => other,
        };
        p[&n]["inputs"]["value"] = json!(small);
    }
    let prompt = nodes_of(&p, "PrimitiveStringMultiline").pop().unwrap();
    let prompt = p[&prompt]["inputs"]["value"].as_str().unwrap().to_string();
    let negative = nodes_of(&p, "CLIPTextEncode")
        .into_iter()
        .find_map(|n| p[&n]["inputs"]["text"].as_str().map(str::to_string))
        .unwrap();
    // The base's seed is the subgraph's input (810138461690240), the refine's a fixed 42.
    let seeds: Vec<u64> =
        nodes_of(&p, "RandomNoise").iter().map(|n| p[n]["inputs"]["noise_seed"].as_u64().unwrap()).collect();
    let (seed, refine_seed) = (*seeds.iter().max().unwrap(), *seeds.iter().min().unwrap());

    let mp4 = comfy::output_of(&s, &p, "ltx");
    assert_eq!(streams(&mp4, dir.path()), ["h264,video", "aac,audio"]);

    // The same clip from `generate`: the template's two stages as flags.
    let generate = |lora_scale: &str| {
        let alone = dir.path().join(format!("alone_{lora_scale}.mp4"));
        let out = Command::new(env!("CARGO_BIN_EXE_fastvideo"))
            .args(["generate", "--model", model.to_str().unwrap(), "--device", "cpu", "--out", alone.to_str().unwrap()])
            .args(["--prompt", &prompt, "--negative-prompt", &negative, "--seed", &seed.to_string()])
            .args(["--frames", "17", "--height", "64", "--width", "64", "--fps", "8", "--guidance", "1"])
            .args(["--audio-guidance", "1", "--knob", "stg_scale=0", "--knob", "audio_stg_scale=0"])
            .args(["--knob", "modality_scale=1", "--knob", "audio_modality_scale=1", "--knob", "guidance_rescale=0"])
            .args(["--knob", "audio_guidance_rescale=0"])
            .args(["--steps", "8", "--node-param", "denoise.audio_seconds=2.125"])
            .args(["--node-param", "denoise.sigmas=[1.0,0.99375,0.9875,0.98125,0.975,0.909375,0.725,0.421875]"])
            .args(["--two-stage", "--node-param", "refine.sigmas=[0.85,0.725,0.4219]"])
            .args(["--node-param", &format!("refine.seed={refine_seed}")])
            .args(["--node-param", "refine.guidance_scale=1", "--node-param", "refine.audio_guidance_scale=1"])
            .arg("--lora")
            .arg(format!("{}={lora_scale}", lora.display()))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        decode(&std::fs::read(&alone).unwrap(), dir.path(), "alone_copy.mp4")
    };
    let (frames, sound) = decode(&mp4, dir.path(), "served.mp4");
    assert_eq!(frames.len(), 17 * 64 * 64 * 3, "17 frames of 64×64");
    let pcm = |b: &[u8]| b.chunks(2).map(|c| i16::from_le_bytes([c[0], c[1]]) as i32).collect::<Vec<_>>();
    // (largest, mean) difference of the frames in 8-bit levels, and the sound's in 16-bit steps.
    let compare = |(f, s): &(Vec<u8>, Vec<u8>)| {
        assert_eq!((f.len(), s.len()), (frames.len(), sound.len()));
        let d: Vec<u8> = frames.iter().zip(f).map(|(x, y)| x.abs_diff(*y)).collect();
        let sound_diff = pcm(&sound).iter().zip(pcm(s)).map(|(a, b)| (a - b).abs()).max().unwrap_or(0);
        (*d.iter().max().unwrap(), d.iter().map(|&x| x as f64).sum::<f64>() / d.len() as f64, sound_diff)
    };
    // The server and `generate` run the same request; H.264 turns the last bits of float
    // rounding between the two processes' forwards (measured: mean 0.05 levels, a few blocks of
    // three frames up to 19) into block decisions, so the frames are compared on average; the
    // sound is compared sample by sample. The LoRA at 0.6 instead of 0.5 moves both far more.
    let same = compare(&generate("0.5"));
    eprintln!("served vs generate: frames max {} mean {:.3} levels, sound {} steps", same.0, same.1, same.2);
    assert!(same.1 < 0.25 && same.2 <= 2, "the template's clip is generate's: {same:?}");
    let other = compare(&generate("0.6"));
    eprintln!("served vs generate with the LoRA at 0.6: {other:?}");
    assert!(other.1 > 4.0 * same.1.max(0.25) && other.2 > 2, "another LoRA strength must differ: {other:?}");
}
