//! An LTX-2 folder (the tiny random one of tests/fixtures/make_ltx2_pipeline_fixtures.py)
//! through the `fastvideo` binary: video and sound from one loop match `LTX2Pipeline` on the
//! same noise, the MP4 carries H.264 and AAC of the video's duration (read back by ffprobe),
//! and bad input is one line naming the field.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tch::Tensor;

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(rel)
}

use crate::common::{copy_dir, fastvideo};

/// The fixture's call, as the issue spells the command (4 steps, guidance 3, audio guidance 5,
/// the other scales the pipeline's defaults), writing into `dir`.
fn parity_args(dir: &Path) -> Vec<String> {
    let d = dir.display();
    let model = fixture("tiny-ltx2").display().to_string();
    let noise = fixture("ltx2/pipeline_noise.safetensors").display().to_string();
    [
        "generate",
        "--model",
        &model,
        "--prompt",
        "a red ball bounces on a wooden floor and a bell rings",
        "--negative-prompt",
        "blurry static silent",
        "--steps",
        "4",
        "--guidance",
        "3",
        "--audio-guidance",
        "5",
        "--frames",
        "17",
        "--height",
        "32",
        "--width",
        "32",
        "--fps",
        "24",
        "--seed",
        "0",
        "--device",
        "cpu",
        "--dtype",
        "fp32",
        "--noise",
        &noise,
        "--frames-dir",
        &format!("{d}"),
        "--audio-out",
        &format!("{d}/out.wav"),
        "--out",
        &format!("{d}/out.mp4"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// `(codec_type, codec_name, duration)` of each stream, as ffprobe reads the file.
fn probe(mp4: &Path) -> Vec<(String, String, f64)> {
    let out = Command::new("ffprobe")
        .args(["-v", "error", "-show_entries", "stream=codec_type,codec_name,duration", "-of", "json"])
        .arg(mp4)
        .output()
        .expect("ffprobe runs (host/scripts/ffmpeg.sh installs it)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let text = |k: &str| s[k].as_str().unwrap_or_default().to_string();
            (text("codec_type"), text("codec_name"), text("duration").parse().unwrap_or(f64::NAN))
        })
        .collect()
}

/// Asserts the run in `dir` (17 PNG frames of `side`², `out.wav`) made the frames and sound of
/// fixture `name`: half an 8-bit step of rounding plus 1e-3 for frames (as the other pipeline
/// tests), the WAV's 16-bit step plus 1e-4 for sound.
fn assert_matches(dir: &Path, name: &str, side: i64) {
    let want = Tensor::read_safetensors(fixture(name)).unwrap();
    let get = |k: &str| want.iter().find(|(n, _)| n == k).unwrap().1.shallow_clone();
    let frames: Vec<Tensor> = (0..17)
        .map(|i| {
            let img = image::open(dir.join(format!("frame_{i:04}.png"))).unwrap().to_rgb8();
            Tensor::from_slice(img.as_raw()).view([side, side, 3]).to_kind(tch::Kind::Float)
        })
        .collect();
    let frames = Tensor::stack(&frames, 0);
    let expected = get("frames") * 255.0;
    assert_eq!(frames.size(), expected.size());
    let e = (frames - &expected).abs().max().double_value(&[]);
    assert!(e <= 0.5 + 1e-3 * 255.0, "{name}: frames differ by {e} levels");
    let wav = hound::WavReader::open(dir.join("out.wav")).unwrap();
    assert_eq!((wav.spec().sample_rate, wav.spec().channels), (24000, 2));
    let samples: Vec<f32> = wav.into_samples::<i16>().map(|s| s.unwrap() as f32 / 32767.0).collect();
    let got = Tensor::from_slice(&samples).view([-1, 2]).tr();
    let audio = get("audio");
    assert_eq!(got.size(), audio.size(), "{name}: the waveform's length");
    let e = (got - &audio).abs().max().double_value(&[]);
    assert!(e <= 1.0 / 32767.0 + 1e-4, "{name}: sound differs by {e}");
}

/// `generate` with `args`, which must succeed.
fn ok(args: &[String]) -> Output {
    let r = fastvideo(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    r
}

/// The two-stage fixture's call (3 steps, 64×64 from a 32×32 base, its noise), before
/// `--two-stage` and its parameters.
fn two_stage_args(dir: &Path) -> Vec<String> {
    let mut args = parity_args(dir);
    set(&mut args, "--steps", "3");
    set(&mut args, "--height", "64");
    set(&mut args, "--width", "64");
    set(&mut args, "--noise", &fixture("ltx2/two_stage_noise.safetensors").display().to_string());
    args
}

/// `args` with `flag`'s value replaced.
fn set(args: &mut [String], flag: &str, value: &str) {
    let i = args.iter().position(|a| a == flag).unwrap();
    args[i + 1] = value.into();
}

/// float32 on both sides (tolerances in [`assert_matches`]); ffprobe reads the MP4.
#[test]
fn video_and_sound_match_the_pipeline_and_the_mp4_has_both_tracks_of_one_duration() {
    let dir = tempfile::tempdir().unwrap();
    ok(&parity_args(dir.path()));
    assert_matches(dir.path(), "ltx2/pipeline.safetensors", 32);
    let streams = probe(&dir.path().join("out.mp4"));
    let find = |t: &str| streams.iter().find(|s| s.0 == t).unwrap_or_else(|| panic!("a {t} stream in {streams:?}"));
    let (video, audio) = (find("video"), find("audio"));
    assert_eq!((video.1.as_str(), audio.1.as_str()), ("h264", "aac"));
    assert!((video.2 - 17.0 / 24.0).abs() < 1e-3, "video lasts {}", video.2);
    assert!((audio.2 - video.2).abs() < 0.005, "sound lasts {} s, the video {} s", audio.2, video.2);
}

/// A LoRA in Lightricks' original names (`diffusion_model.patchify_proj`, `adaln_single`, as the
/// trainer and ComfyUI ship them) at 0.7: `LTX2Pipeline.load_lora_weights` + `set_adapters` on the
/// same noise (tests/fixtures/make_ltx2_lora_fixtures.py), within [`assert_matches`]' tolerances.
#[test]
fn a_lora_in_the_original_names_matches_the_pipeline_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = parity_args(dir.path());
    let lora = format!("{}=0.7", fixture("ltx2_lora/pipeline_original.safetensors").display());
    args.extend(["--lora".to_string(), lora]);
    ok(&args);
    assert_matches(dir.path(), "ltx2_lora/pipeline.safetensors", 32);
}

/// `node_params.denoise.sigmas`: the base loop on levels as given (no shift, a final 0), as
/// `LTX2Pipeline(sigmas=…)` runs them with a scheduler without its dynamic shift
/// (tests/fixtures/make_ltx2_given_sigmas_fixture.py); a list that does not descend is refused.
#[test]
fn given_noise_levels_run_as_given() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = parity_args(dir.path());
    args.extend(["--node-param".to_string(), "denoise.sigmas=[1.0,0.9,0.7,0.4]".to_string()]);
    ok(&args);
    assert_matches(dir.path(), "ltx2/given_sigmas.safetensors", 32);
    let mut bad = parity_args(dir.path());
    bad.extend(["--node-param".to_string(), "denoise.sigmas=[0.5,0.9]".to_string()]);
    let r = fastvideo(&bad.iter().map(String::as_str).collect::<Vec<_>>());
    crate::common::assert_user_error(&r, "node_params.denoise.sigmas");
}

#[test]
fn the_official_openai_client_gets_a_video_with_sound_from_serve() {
    let m = fixture("tiny-ltx2").display().to_string();
    let server = crate::common::server::Server::start(&["--model", &m]);
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("sound.mp4");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/clients/openai_sound.py");
    let out =
        Command::new(crate::common::client_python()).arg(script).arg(&server.base).arg(&out_path).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["two_stage_status"], "completed", "{r}");
    assert_eq!(r["audio_sample_rate"], 24000);
    assert_eq!(r["bad_request"]["status"], 400);
    assert_eq!(r["bad_request"]["param"], "guidance_scale_2");
    let streams = probe(&out_path);
    let kinds: Vec<(&str, &str)> = streams.iter().map(|s| (s.0.as_str(), s.1.as_str())).collect();
    assert_eq!(kinds, [("video", "h264"), ("audio", "aac")]);
    assert!((streams[0].2 - streams[1].2).abs() < 0.005, "{streams:?}");
}

/// diffusers' two-stage recipe (stage one at half the size, `LTX2LatentUpsamplePipeline`, stage
/// two on `STAGE_2_DISTILLED_SIGMA_VALUES` without guidance), with `noise_scale` 0 so no fresh
/// noise needs matching: the same frames and sound. float32; as the one-stage test.
#[test]
fn two_stages_match_the_documented_recipe() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = two_stage_args(dir.path());
    args.extend(["--two-stage", "--node-param", "refine.noise_scale=0"].map(String::from));
    ok(&args);
    assert_matches(dir.path(), "ltx2/two_stage.safetensors", 64);
}

/// The reference's distilled recipe swaps a LoRA in for stage two only: `--lora FILE=1@refine`
/// against the two-stage recipe with `load_lora_weights` + `set_adapters` before stage two
/// (tests/fixtures/make_ltx2_lora_fixtures.py), as the two-stage test; an adapter bound to one
/// loop without the two-stage recipe is refused naming `lora`.
#[test]
fn a_lora_bound_to_the_refine_loop_matches_the_recipe_with_it_in_stage_two() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = two_stage_args(dir.path());
    let lora = format!("{}=1@refine", fixture("ltx2_lora/pipeline_original.safetensors").display());
    args.extend(["--two-stage", "--node-param", "refine.noise_scale=0", "--lora", &lora].map(String::from));
    ok(&args);
    assert_matches(dir.path(), "ltx2_lora/two_stage.safetensors", 64);

    let mut one_stage = parity_args(dir.path());
    one_stage.extend(["--lora".to_string(), lora]);
    let r = fastvideo(&one_stage.iter().map(String::as_str).collect::<Vec<_>>());
    crate::common::assert_user_error(&r, "needs the two-stage recipe");
}

/// `LTX2ImageToVideoPipeline` on the same noise (`image_crf=0`): the given latents' first latent
/// frame stays clean (timestep 0, not stepped; the picture is then unused, as the pipeline
/// does). float32; as the one-stage test.
#[test]
fn image_to_video_matches_the_pipeline() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = parity_args(dir.path());
    set(&mut args, "--steps", "3");
    set(&mut args, "--noise", &fixture("ltx2/i2v_noise.safetensors").display().to_string());
    args.extend(["--image".to_string(), fixture("ltx2/first_frame.png").display().to_string()]);
    ok(&args);
    assert_matches(dir.path(), "ltx2/i2v.safetensors", 32);
}

/// `LTX2ConditionPipeline` on the same noise (`noise_scale=0`, `crf=0`;
/// tests/fixtures/make_ltx2_condition_fixture.py): a picture at frame 0 with strength 0.8 written
/// over the first latent frame, and two appended at frames 9 (0.5) and 13 (1) — per-token
/// timesteps, the clean estimate blended toward the pictures, the appended tokens counted in the
/// schedule's shift and dropped before decoding. float32; as the one-stage test.
#[test]
fn keyframes_match_the_condition_pipeline() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = parity_args(dir.path());
    set(&mut args, "--steps", "3");
    set(&mut args, "--noise", &fixture("ltx2/condition_noise.safetensors").display().to_string());
    for (name, at) in [("first_frame", "0=0.8"), ("keyframe_a", "9=0.5"), ("keyframe_b", "13")] {
        args.extend(["--keyframe".to_string(), format!("{}@{at}", fixture(&format!("ltx2/{name}.png")).display())]);
    }
    ok(&args);
    assert_matches(dir.path(), "ltx2/condition.safetensors", 32);
}

/// LTX-2.3's layout (split positions, gated attention, prompt modulation from the sigma, STG that
/// acts, per-stream text projections) through the same call: the same frames and sound as
/// `LTX2Pipeline`. float32; as the one-stage test.
#[test]
fn the_23_layout_matches_the_pipeline() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = parity_args(dir.path());
    set(&mut args, "--model", &fixture("tiny-ltx2-23").display().to_string());
    set(&mut args, "--noise", &fixture("ltx2/pipeline_23_noise.safetensors").display().to_string());
    ok(&args);
    assert_matches(dir.path(), "ltx2/pipeline_23.safetensors", 32);
}

/// The pipeline's `audio_guidance_scale or guidance_scale`: 0 is the video's scale.
#[test]
fn an_audio_scale_of_zero_is_the_videos() {
    let wav = |audio: &str| {
        let dir = tempfile::tempdir().unwrap();
        let mut args = parity_args(dir.path());
        set(&mut args, "--audio-guidance", audio);
        ok(&args);
        std::fs::read(dir.path().join("out.wav")).unwrap()
    };
    let (zero, three, five) = (wav("0"), wav("3"), wav("5"));
    assert!(zero == three, "audio guidance 0 runs the video's 3");
    assert!(zero != five, "and the scale matters");
}

/// ComfyUI's `gradient_estimation` on LTX-2's loop: its first step is Euler's (one level given:
/// the same frames and sound to the bit), later ones step along `2·v − v_prev` (the scheduler's
/// four steps: not Euler's).
#[test]
fn gradient_estimation_starts_as_euler_and_then_extrapolates() {
    let run = |sampler: &str, levels: &str| {
        let dir = tempfile::tempdir().unwrap();
        let mut args = parity_args(dir.path());
        args.extend(["--sampler".to_string(), sampler.to_string()]);
        if !levels.is_empty() {
            set(&mut args, "--steps", "1");
            args.extend(["--node-param".to_string(), format!("denoise.sigmas={levels}")]);
        }
        ok(&args);
        let frame = std::fs::read(dir.path().join("frame_0008.png")).unwrap();
        (frame, std::fs::read(dir.path().join("out.wav")).unwrap())
    };
    assert!(run("gradient_estimation", "[1.0]") == run("euler", "[1.0]"), "one step is Euler's");
    let (ge, euler) = (run("gradient_estimation", ""), run("euler", ""));
    assert!(ge.0 != euler.0 && ge.1 != euler.1, "later steps extrapolate the velocity");
}

#[test]
fn bad_input_is_one_line_naming_the_field() {
    let m = fixture("tiny-ltx2").display().to_string();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.mp4");
    let o = out.to_str().unwrap();
    let bad_noise = dir.path().join("noise.safetensors");
    let z = Tensor::zeros([1, 8, 2, 4, 4], (tch::Kind::Float, tch::Device::Cpu));
    let a = Tensor::zeros([1, 4, 18, 4], (tch::Kind::Float, tch::Device::Cpu));
    Tensor::write_safetensors(&[("latents", &z), ("audio_latents", &a)], &bad_noise).unwrap();
    let noise = bad_noise.to_str().unwrap();
    let key = |at: &str| format!("{}@{at}", fixture("ltx2/keyframe_b.png").display());
    let cases: [(&[&str], &str); 13] = [
        (&["--frames", "16"], "diffusion.num_frames: 16"),
        (&["--height", "48"], "diffusion.height: 48"),
        (&["--audio-guidance", "101"], "diffusion.audio_guidance_scale"),
        (&["--frames", "17", "--height", "32", "--width", "32", "--noise", noise], "inputs.latent `latents`"),
        // The refine node's parameters are checked against its schema before any work.
        (&["--node-param", "refine.sigma=0.5"], "node_params.refine"),
        (&["--node-param", "refine.noise_scale=2"], "node_params.refine.noise_scale"),
        (&["--node-param", "upscale.x=1"], "node_params.upscale"),
        (&["--two-stage", "--height", "96", "--width", "64", "--frames", "9"], "diffusion.height: 96"),
        (&["--sampler", "unipc", "--frames", "9", "--height", "32", "--width", "32"], "sampling.sampler"),
        // Keyframes: a frame no latent frame starts at, past the clip, a strength outside [0, 1].
        (&["--frames", "17", "--keyframe", &key("6")], "].frame: 6: LTX-2 places pictures at frame 0 or 1 + 4k"),
        (&["--frames", "17", "--keyframe", &key("17")], "].frame: 17 is past the clip's last frame (16)"),
        (&["--frames", "17", "--keyframe", &key("9=1.5")], "].strength: 1.5 is outside [0, 1]"),
        (
            &["--two-stage", "--frames", "9", "--height", "64", "--width", "64", "--keyframe", &key("0")],
            "keyframe inputs do not run",
        ),
    ];
    for (extra, want) in cases {
        let r =
            fastvideo(&[&["generate", "--model", &m, "--prompt", "p", "--steps", "2", "--out", o][..], extra].concat());
        crate::common::assert_user_error(&r, want);
    }
}

/// A folder's `fastvideo.json` sets LTX-2's run defaults (as the default model with sound will
/// ship them), and `fastvideo eval` scores the sound of a model that makes some: every clip is
/// listened to, and the sound–picture agreement comes back beside the picture's. (The tiny
/// folder's weights are random: the scores' values are not asserted here; the listener's
/// accuracy on the procedural soundtracks is `fastvideo_procedural`'s own tests.)
#[test]
fn eval_listens_to_a_model_with_sound_at_its_folders_defaults() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("tiny-ltx2");
    copy_dir(&fixture("tiny-ltx2"), &model);
    let defaults = r#"{"description": "tiny random LTX-2", "height": 32, "width": 32, "num_frames": 9, "fps": 24,
        "steps": 2, "max_sequence_length": 16, "knobs": {"audio_guidance_scale": 4, "stg_scale": 0}}"#;
    std::fs::write(model.join("fastvideo.json"), defaults).unwrap();
    let m = model.to_str().unwrap().to_string();
    let out = ok(&["eval", "--model", &m, "--limit", "2", "--seeds", "1", "--json"].map(String::from));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["sound_tally"]["clips"], 2, "{report}");
    assert_eq!(report["tally"]["clips"], 2);
    let s = &report["sound_accuracy"];
    for k in ["pitch", "cue", "tonality"] {
        let v = s[k].as_f64().unwrap_or(-1.0);
        assert!((0.0..=1.0).contains(&v), "sound_accuracy.{k} = {v}");
    }
    assert!(report["settings"].as_str().unwrap().contains("2 steps"), "{report}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("sound–picture agreement"), "{err}");
    // Its knob defaults are the requests' (a request may still set them).
    let mp4 = tmp.path().join("x.mp4");
    let gen = |extra: &[&str]| {
        let mut args = vec!["generate", "--model", &m, "--prompt", "a red circle", "--out", mp4.to_str().unwrap()];
        args.extend_from_slice(extra);
        fastvideo(&args)
    };
    let err = String::from_utf8_lossy(&gen(&[]).stderr).to_string();
    assert!(err.contains("audio_guidance_scale 4") && err.contains("stg_scale 0"), "{err}");
    let err = String::from_utf8_lossy(&gen(&["--knob", "stg_scale=2"]).stderr).to_string();
    assert!(err.contains("stg_scale 2"), "{err}");
    // The defaults file is checked: an unknown field, an unknown knob or a value out of its range
    // is refused naming the file (and the knob).
    for (bad, names) in [
        (r#"{"frames": 9}"#, "frames"),
        (r#"{"knobs": {"nope": 1}}"#, "nope"),
        (r#"{"knobs": {"guidance_rescale": 3}}"#, "guidance_rescale"),
    ] {
        std::fs::write(model.join("fastvideo.json"), bad).unwrap();
        let out = gen(&[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("fastvideo.json") && err.contains(names) && !err.contains("panicked"),
            "{bad}: {err}"
        );
    }
}
