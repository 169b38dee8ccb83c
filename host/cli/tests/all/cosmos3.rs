//! A Cosmos3 omni folder (the tiny random one in tests/fixtures) through the `fastvideo` binary
//! as users run it: `generate` writes an MP4 with an AAC track, a WAV and predicted actions;
//! `serve` answers the official `openai` client with a chat from the reasoner and a video with
//! sound from the denoiser, on one loaded copy of the weights; bad input is one line or a 400.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::common::server::Server;

fn fastvideo(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fastvideo")).args(args).env("RUST_BACKTRACE", "1").output().expect("binary runs")
}

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(rel)
}

fn model() -> String {
    fixture("tiny-cosmos3").display().to_string()
}

/// The (video, audio) tracks' played durations in seconds: an edit list's segment where the
/// track has one (the AAC track's skips the encoder's priming), else the media's.
fn track_seconds(mp4: &[u8]) -> (f64, Option<f64>) {
    let r = mp4::Mp4Reader::read_header(std::io::Cursor::new(mp4), mp4.len() as u64).unwrap();
    let movie = r.timescale() as f64;
    let mut video = 0.0;
    let mut audio = None;
    for t in r.tracks().values() {
        let edit = t.trak.edts.as_ref().and_then(|e| e.elst.as_ref()).and_then(|l| l.entries.first());
        let secs = edit.map_or(t.duration().as_secs_f64(), |e| e.segment_duration as f64 / movie);
        match t.track_type().unwrap() {
            mp4::TrackType::Video => video = secs,
            mp4::TrackType::Audio => audio = Some(secs),
            _ => {}
        }
    }
    (video, audio)
}

#[test]
fn generate_writes_sound_as_an_aac_track_and_a_wav_and_actions_as_safetensors() {
    let dir = tempfile::tempdir().unwrap();
    let (out, wav) = (dir.path().join("clip.mp4"), dir.path().join("clip.wav"));
    let (o, w) = (out.to_str().unwrap(), wav.to_str().unwrap());
    let m = model();
    let common = ["generate", "--model", &m, "--prompt", "a robot arm stacks red blocks", "--steps", "2"];
    let shape = ["--frames", "17", "--fps", "16", "--height", "48", "--width", "64"];
    let r = fastvideo(&[&common[..], &shape, &["--out", o, "--audio-out", w]].concat());
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let (video, audio) = track_seconds(&std::fs::read(&out).unwrap());
    let audio = audio.expect("an AAC track");
    assert!((video - 17.0 / 16.0).abs() < 1e-3, "video lasts {video}");
    assert!((audio - video).abs() < 0.01, "the sound ({audio} s) is trimmed to the video ({video} s)");
    let wav = hound::WavReader::open(&wav).unwrap();
    assert_eq!((wav.spec().sample_rate, wav.spec().channels), (8000, 2));
    // A policy's actions: [chunk, pusht's 2].
    let actions = dir.path().join("actions.safetensors");
    let frame = fixture("cosmos3/first_frame.png").display().to_string();
    let r = fastvideo(
        &[
            &common[..],
            &[
                "--image",
                &frame,
                "--action-domain",
                "pusht",
                "--action-chunk-size",
                "4",
                "--action-resolution-tier",
                "256",
            ],
            &["--out", o, "--actions-out", actions.to_str().unwrap()],
        ]
        .concat(),
    );
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let t = tch::Tensor::read_safetensors(&actions).unwrap();
    assert_eq!(t[0].0, "action");
    assert_eq!(t[0].1.size(), [4, 2]);
}

#[test]
fn bad_input_is_one_line_naming_the_field() {
    let m = model();
    let frame = fixture("cosmos3/first_frame.png").display().to_string();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.mp4");
    let o = out.to_str().unwrap();
    let cases: [(&[&str], &str); 4] = [
        (&["--frames", "16"], "diffusion.num_frames: 16"),
        (&["--height", "40"], "diffusion.height: 40"),
        (
            &["--image", &frame, "--action-domain", "mars_rover", "--action-chunk-size", "4"],
            "diffusion.action.domain_name",
        ),
        (&["--no-sound", "--audio-out", "x.wav"], "--audio-out"),
    ];
    for (extra, want) in cases {
        let r = fastvideo(&[&["generate", "--model", &m, "--prompt", "p", "--out", o][..], extra].concat());
        crate::common::assert_user_error(&r, want);
    }
}

#[test]
fn the_official_openai_client_chats_with_the_reasoner_and_makes_a_video_with_sound() {
    let m = model();
    let server = Server::start(&["--model", &m]);
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("omni.mp4");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/clients/openai_omni.py");
    let out = Command::new(crate::common::client_python())
        .arg(script)
        .arg(&server.base)
        .arg(&out_path)
        .arg(fixture("cosmos3/first_frame.png"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["models"], serde_json::json!(["tiny-cosmos3", "tiny-cosmos3-reasoner"]));
    assert_eq!(r["chat_model"], "tiny-cosmos3-reasoner");
    assert_eq!(r["chat_tokens"], 8);
    assert_eq!(r["streamed"], r["chat_text"], "streamed and whole greedy replies agree");
    assert_eq!(r["video_status"], "completed");
    assert_eq!(r["audio_sample_rate"], 8000);
    let (video, audio) = track_seconds(&std::fs::read(&out_path).unwrap());
    assert!((audio.expect("an AAC track") - video).abs() < 0.01, "AAC of the video's duration");
    assert_eq!(r["policy_status"], "completed");
    let action = r["action"].as_array().expect("predicted actions");
    assert_eq!((action.len(), action[0].as_array().unwrap().len()), (4, 2));
    assert_eq!(r["bad_request"]["status"], 400);
    assert_eq!(r["bad_request"]["param"], "action.domain_name");
}
