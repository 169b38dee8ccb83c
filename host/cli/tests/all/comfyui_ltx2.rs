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

/// `fastvideo serve` on the tiny LTX-2 folder with the core and LTX-2 packs, `files` (the
/// template's model files) mapped to it and the adapter `lora` (the template's LoRA file name)
/// served from the tiny folder's adapter; the folder, and the adapter's path.
fn serve(dir: &Path, files: &[&str], lora: &str) -> (Server, PathBuf, PathBuf) {
    let model = fixture("tiny-ltx2");
    let lines: String = files.iter().map(|f| format!("\"{f}\" = \"{}\"\n", model.display())).collect();
    let lora = dir.join(lora);
    std::fs::copy(fixture("ltx2_lora/pipeline_original.safetensors"), &lora).unwrap();
    let packs = [("fastvideo_translator_comfy_core", "comfy-core"), ("fastvideo_translator_comfy_ltx2", "comfy-ltx2")];
    let deploy = comfy::deploy_with(dir, &packs, &lines);
    let text = format!("{}{}", comfy::adapter("distilled", &lora), std::fs::read_to_string(&deploy).unwrap());
    std::fs::write(&deploy, text).unwrap();
    let comfy_dir = dir.join("comfy");
    let args = ["--deploy", deploy.to_str().unwrap(), "--comfy-dir", comfy_dir.to_str().unwrap()];
    let s = Server::start(&[&args[..], &["--model", model.to_str().unwrap()]].concat());
    (s, model, lora)
}

/// The template `name` of the corpus in the API format.
fn template(dir: &Path, name: &str) -> Value {
    let ui: Value = serde_json::from_str(&std::fs::read_to_string(comfy::corpus().join(name)).unwrap()).unwrap();
    comfy::to_api(dir, &ui)
}

/// `fastvideo generate` on `model` with `args`: its clip decoded (frames, sound).
fn generate(dir: &Path, model: &Path, args: &[String]) -> (Vec<u8>, Vec<u8>) {
    let alone = dir.join("alone.mp4");
    let out = Command::new(env!("CARGO_BIN_EXE_fastvideo"))
        .args(["generate", "--model", model.to_str().unwrap(), "--device", "cpu", "--out", alone.to_str().unwrap()])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    decode(&std::fs::read(&alone).unwrap(), dir, "alone_copy.mp4")
}

/// The flags of ComfyUI's `CFGGuider` at `cfg` on both stages of a two-stage graph: plain
/// guidance on both streams, the base on `base` levels, the refine on `refine` levels with
/// its own noise seed.
fn two_stage_flags(cfg: &str, base: &str, refine: &str, refine_seed: u64, audio_seconds: f64) -> Vec<String> {
    let steps = base.split(',').count().to_string();
    [
        "--guidance",
        cfg,
        "--audio-guidance",
        cfg,
        "--knob",
        "stg_scale=0",
        "--knob",
        "audio_stg_scale=0",
        "--knob",
        "modality_scale=1",
        "--knob",
        "audio_modality_scale=1",
        "--knob",
        "guidance_rescale=0",
        "--knob",
        "audio_guidance_rescale=0",
        "--steps",
        &steps,
        "--two-stage",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([
        "--node-param".into(),
        format!("denoise.sigmas=[{base}]"),
        "--node-param".into(),
        format!("denoise.audio_seconds={audio_seconds:?}"),
        "--node-param".into(),
        format!("refine.sigmas=[{refine}]"),
        "--node-param".into(),
        format!("refine.seed={refine_seed}"),
        "--node-param".into(),
        "refine.guidance_scale=1".into(),
        "--node-param".into(),
        "refine.audio_guidance_scale=1".into(),
    ])
    .collect()
}

/// An LTX-2.0 template at a size the tiny folder runs fast: its 1280×720 `EmptyImage` (scaled
/// by 0.5 for the base) made 64×64, so the base is 32×32 and the clip 64×64; 121 frames → 17.
fn shrink_ltx2_0(p: &mut Value) {
    for n in nodes_of(p, "EmptyImage") {
        p[&n]["inputs"]["width"] = json!(64);
        p[&n]["inputs"]["height"] = json!(64);
    }
    for n in nodes_of(p, "PrimitiveInt") {
        if p[&n]["inputs"]["value"] == json!(121) {
            p[&n]["inputs"]["value"] = json!(17);
        }
    }
}

/// `generate`'s flags for a shrunk LTX-2.0 template's clip (17 frames 64×64 at its 24 fps, its
/// `euler_ancestral`), before the stages' flags.
fn ltx2_0_flags(prompt: &str, negative: &str, seed: &str) -> Vec<String> {
    ["--prompt", prompt, "--negative-prompt", negative, "--seed", seed]
        .iter()
        .chain(&["--frames", "17", "--height", "64", "--width", "64", "--fps", "24", "--sampler", "euler_ancestral"])
        .map(|s| s.to_string())
        .collect()
}

/// (largest, mean) difference of two clips' frames in 8-bit levels, and their sounds' in
/// 16-bit steps.
fn compare((frames, sound): &(Vec<u8>, Vec<u8>), (f, s): &(Vec<u8>, Vec<u8>)) -> (u8, f64, i32) {
    assert_eq!((f.len(), s.len()), (frames.len(), sound.len()));
    let pcm = |b: &[u8]| b.chunks(2).map(|c| i16::from_le_bytes([c[0], c[1]]) as i32).collect::<Vec<_>>();
    let d: Vec<u8> = frames.iter().zip(f).map(|(x, y)| x.abs_diff(*y)).collect();
    let sound_diff = pcm(sound).iter().zip(pcm(s)).map(|(a, b)| (a - b).abs()).max().unwrap_or(0);
    (*d.iter().max().unwrap(), d.iter().map(|&x| x as f64).sum::<f64>() / d.len() as f64, sound_diff)
}

#[test]
fn the_ltx_2_3_text_to_video_template_runs_with_sound_as_generate() {
    let dir = tempfile::tempdir().unwrap();
    let files = [
        "ltx-2.3-22b-dev-fp8.safetensors",
        "gemma_3_12B_it_fp4_mixed.safetensors",
        "ltx-2.3-spatial-upscaler-x2-1.1.safetensors",
    ];
    let (s, model, lora) =
        serve(dir.path(), &files, "ltx_2.3_22b_distilled_1.1_lora_dynamic_fro09_avg_rank_111_bf16.safetensors");
    let mut p = template(dir.path(), "video_ltx2_3_t2v.json");
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
    let served = decode(&mp4, dir.path(), "served.mp4");
    assert_eq!(served.0.len(), 17 * 64 * 64 * 3, "17 frames of 64×64");

    // The same clip from `generate`: the template's two stages as flags, its LoRA on both.
    let mut args: Vec<String> = ["--prompt", &prompt, "--negative-prompt", &negative, "--seed", &seed.to_string()]
        .iter()
        .chain(&["--frames", "17", "--height", "64", "--width", "64", "--fps", "8"])
        .map(|s| s.to_string())
        .collect();
    let base = "1.0,0.99375,0.9875,0.98125,0.975,0.909375,0.725,0.421875";
    args.extend(two_stage_flags("1", base, "0.85,0.725,0.4219", refine_seed, 17.0 / 8.0));
    let with_lora = |scale: &str| [args.clone(), vec!["--lora".into(), format!("{}={scale}", lora.display())]].concat();
    // The server and `generate` run the same request; H.264 turns the last bits of float
    // rounding between the two processes' forwards (measured: mean 0.05 levels, a few blocks of
    // three frames up to 19) into block decisions, so the frames are compared on average; the
    // sound is compared sample by sample. The LoRA at 0.6 instead of 0.5 moves both far more.
    let same = compare(&served, &generate(dir.path(), &model, &with_lora("0.5")));
    eprintln!("served vs generate: frames max {} mean {:.3} levels, sound {} steps", same.0, same.1, same.2);
    assert!(same.1 < 0.25 && same.2 <= 2, "the template's clip is generate's: {same:?}");
    let other = compare(&served, &generate(dir.path(), &model, &with_lora("0.6")));
    eprintln!("served vs generate with the LoRA at 0.6: {other:?}");
    assert!(other.1 > 4.0 * same.1.max(0.25) && other.2 > 2, "another LoRA strength must differ: {other:?}");
}

/// ComfyUI's LTX-2.0 distilled template: `euler_ancestral` on both stages, the latent's size from
/// `GetImageSize` of a scaled `EmptyImage` (known when the workflow compiles), the prompt on
/// both branches at cfg 1: the clip `generate --sampler euler_ancestral` makes.
#[test]
fn the_ltx_2_distilled_template_runs_with_euler_ancestral_as_generate() {
    let dir = tempfile::tempdir().unwrap();
    let files = [
        "ltx-2-19b-distilled.safetensors",
        "gemma_3_12B_it_fp4_mixed.safetensors",
        "ltx-2-spatial-upscaler-x2-1.0.safetensors",
    ];
    let (s, model, _) = serve(dir.path(), &files, "ltx-2-19b-lora-camera-control-dolly-left.safetensors");
    let mut p = template(dir.path(), "video_ltx2_t2v_distilled.json");
    shrink_ltx2_0(&mut p);
    let prompt = nodes_of(&p, "PrimitiveStringMultiline").pop().unwrap();
    let prompt = p[&prompt]["inputs"]["value"].as_str().unwrap().to_string();
    let seed_of = |v: u64| nodes_of(&p, "RandomNoise").iter().any(|n| p[n]["inputs"]["noise_seed"] == json!(v));
    assert!(seed_of(45) && seed_of(420), "the template's seeds: the base's 45, the refine's 420");
    let mp4 = comfy::output_of(&s, &p, "ltx20");
    assert_eq!(streams(&mp4, dir.path()), ["h264,video", "aac,audio"]);
    let served = decode(&mp4, dir.path(), "served.mp4");

    let mut args = ltx2_0_flags(&prompt, &prompt, "45");
    let base = "1.0,0.99375,0.9875,0.98125,0.975,0.909375,0.725,0.421875";
    args.extend(two_stage_flags("1", base, "0.909375,0.725,0.421875", 420, 17.0 / 24.0));
    let same = compare(&served, &generate(dir.path(), &model, &args));
    eprintln!("served vs generate: frames max {} mean {:.3} levels, sound {} steps", same.0, same.1, same.2);
    assert!(same.1 < 0.25 && same.2 <= 2, "the template's clip is generate's: {same:?}");
    // Plain Euler is another clip: the template's sampler is the one that ran.
    let euler: Vec<String> =
        args.iter().map(|a| if a == "euler_ancestral" { "euler".into() } else { a.clone() }).collect();
    let other = compare(&served, &generate(dir.path(), &model, &euler));
    assert!(other.1 > 4.0 * same.1.max(0.25), "euler must differ from euler_ancestral: {other:?}");
}

/// ComfyUI's LTX-2.0 text-to-video template: `LTXVScheduler` for the base (its levels computed
/// when the workflow compiles), guidance 4, and the distilled LoRA on the refine's model only —
/// bound to that loop, as the reference swaps it in for stage two.
#[test]
fn the_ltx_2_template_swaps_its_distilled_lora_in_for_stage_two() {
    let dir = tempfile::tempdir().unwrap();
    let files = [
        "ltx-2-19b-dev-fp8.safetensors",
        "gemma_3_12B_it_fp4_mixed.safetensors",
        "ltx-2-spatial-upscaler-x2-1.0.safetensors",
    ];
    let (s, model, lora) = serve(dir.path(), &files, "ltx-2-19b-distilled-lora-384.safetensors");
    let mut p = template(dir.path(), "video_ltx2_t2v.json");
    shrink_ltx2_0(&mut p);
    let sched = nodes_of(&p, "LTXVScheduler").pop().unwrap();
    p[&sched]["inputs"]["steps"] = json!(3);
    let cond = nodes_of(&p, "LTXVConditioning").pop().unwrap();
    let text = |k: &str| p[&link(&p, &cond, k)]["inputs"]["text"].as_str().unwrap().to_string();
    let (prompt, negative) = (text("positive"), text("negative"));
    let mp4 = comfy::output_of(&s, &p, "ltx20t2v");
    assert_eq!(streams(&mp4, dir.path()), ["h264,video", "aac,audio"]);
    let served = decode(&mp4, dir.path(), "served.mp4");

    let mut args = ltx2_0_flags(&prompt, &negative, "10");
    // LTXVScheduler's 3 levels for the 3×1×1 latent (ComfyUI's arithmetic, run in Python).
    let base = "1.0,0.6278722286224365,0.10000002384185791";
    args.extend(two_stage_flags("4", base, "0.909375,0.725,0.421875", 0, 17.0 / 24.0));
    let with_lora = |at: &str| [args.clone(), vec!["--lora".into(), format!("{}=1{at}", lora.display())]].concat();
    let same = compare(&served, &generate(dir.path(), &model, &with_lora("@refine")));
    eprintln!("served vs generate: frames max {} mean {:.3} levels, sound {} steps", same.0, same.1, same.2);
    assert!(same.1 < 0.25 && same.2 <= 2, "the template's clip is generate's: {same:?}");
    // The LoRA on both loops is another clip: the template's binding is the one that ran.
    let both = compare(&served, &generate(dir.path(), &model, &with_lora("")));
    assert!(both.1 > 4.0 * same.1.max(0.25), "the LoRA in both stages must differ: {both:?}");
}
