//! `fastvideo chat` on the tiny Qwen3 fixture (random weights: the text is noise, the counts and
//! the streaming are what is checked), and its errors.

use std::path::PathBuf;
use std::process::{Command, Output};

fn fastvideo(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fastvideo")).args(args).env("RUST_BACKTRACE", "1").output().expect("binary runs")
}

fn lm() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny-qwen3").display().to_string()
}

#[test]
fn chat_streams_a_completion_and_reports_usage() {
    let out = fastvideo(&["chat", "--lm", &lm(), "a crimson disc gliding leftwards over snow", "--max-tokens", "20"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // The default system turn, the user turn and the assistant's opening: 71 template tokens.
    assert!(err.contains("usage: 71 prompt + 20 completion tokens, finish length"), "{err}");
    assert!(!out.stdout.is_empty());
    // Seeded sampling is reproducible run to run.
    let args = ["chat", "--lm", &lm(), "hi", "--max-tokens", "12", "--temperature", "1.3", "--seed", "5"];
    assert_eq!(fastvideo(&args).stdout, fastvideo(&args).stdout);
}

#[test]
fn chat_errors_name_the_field_and_exit_non_zero() {
    for (args, want) in [
        (vec!["--top-p", "2"], "top_p"),
        (vec!["--temperature=-1"], "temperature"),
        (vec!["--max-tokens", "0"], "max_tokens"),
    ] {
        let lm_dir = lm();
        let mut all = vec!["chat", "--lm", lm_dir.as_str(), "hi"];
        all.extend(args);
        let out = fastvideo(&all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains(want) && !err.contains("panicked"), "{want}: {err}");
    }
    let out = fastvideo(&["chat", "--lm", "/nonexistent", "hi"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent does not exist"));
}

/// The official `openai` client against `serve --lm`: a chat completion whole and streamed (the
/// same greedy text as `fastvideo chat`, usage in the last chunk), a plain completion and a bad
/// field, while a video job runs on the same engine.
#[test]
fn the_openai_client_streams_chat_completions_beside_a_video_job() {
    use crate::common::server::Server;
    use serde_json::{json, Value};
    let lm_dir = lm();
    let server = Server::start(&["--lm", &lm_dir, "--lm-kv-cache", "8M"]);
    let (status, video) = server.post(
        "/v1/videos",
        json!({"prompt": "a red circle moving left on a white background", "num_inference_steps": 8}),
    );
    assert_eq!(status, 200, "{video}");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/clients/openai_chat.py");
    let out = Command::new(crate::common::client_python()).arg(script).arg(&server.base).arg("hi").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["models"], json!(["fastvideo-default", "tiny-qwen3"]));
    let caps = server.get("/v1/capabilities").1;
    assert_eq!(caps["data"][1]["model"], "tiny-qwen3", "{caps}");
    assert_eq!(caps["data"][1]["tasks"], json!(["text"]), "{caps}");
    assert!(caps["data"][1]["context_tokens"].as_u64().unwrap() > 0, "{caps}");
    let cli = fastvideo(&["chat", "--lm", &lm_dir, "hi", "--max-tokens", "12"]);
    assert_eq!(
        r["content"].as_str().unwrap(),
        String::from_utf8_lossy(&cli.stdout).trim_end_matches('\n'),
        "served = CLI"
    );
    let streamed: String = r["deltas"].as_array().unwrap().iter().map(|d| d.as_str().unwrap()).collect();
    assert_eq!(streamed, r["content"].as_str().unwrap(), "streamed = whole");
    assert!(r["deltas"].as_array().unwrap().len() > 1, "streamed in pieces: {r}");
    assert_eq!(r["usage"], r["stream_usage"]);
    let u = &r["usage"];
    assert_eq!(
        u["total_tokens"],
        json!(u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap())
    );
    let reason = r["finish_reason"].as_str().unwrap();
    assert_eq!(r["stream_reasons"], json!([reason]));
    assert_eq!((reason == "length"), u["completion_tokens"] == 12, "{u}");
    assert_eq!(r["completion_usage"]["prompt_tokens"].as_u64().map(|n| n > 0), Some(true));
    assert_eq!(r["bad_request"], json!({"status": 400, "param": "max_tokens"}));
    let hi = json!([{"role": "user", "content": "hi"}]);
    for (body, param) in [
        (json!({"model": "tiny-qwen3"}), "messages"),
        (json!({"messages": [{"content": "hi"}]}), "messages[0].role"),
        (json!({"messages": hi, "n": 2}), "n"),
        (json!({"messages": hi, "model": "gpt-4o"}), "model"),
        (json!({"messages": hi, "top_p": 2.0}), "top_p"),
        (json!({"messages": hi, "stop": [""]}), "stop"),
        (json!({"messages": hi, "max_tokens": 100000}), "max_tokens"),
        (json!({"messages": hi, "tools": []}), "tools"),
    ] {
        let (status, v) = server.post("/v1/chat/completions", body.clone());
        assert_eq!((status, v["error"]["param"].as_str()), (400, Some(param)), "{body}: {v}");
    }
    assert_eq!(server.wait_done(video["id"].as_str().unwrap())["status"], "completed");
}

/// Sixteen chats of different lengths at once beside a video job, three of them streamed and
/// dropped by their client mid-way: every finished one equals its solo run (greedy), the video
/// completes, and every key/value block is back in the pool at the end.
#[test]
fn concurrent_chats_equal_their_solo_runs_and_free_every_block() {
    use std::io::{BufRead, BufReader};
    use std::time::{Duration, Instant};

    use crate::common::server::{metric, Server};
    use serde_json::json;
    let lm_dir = lm();
    let server = std::sync::Arc::new(Server::start(&["--lm", &lm_dir, "--lm-kv-cache", "8M", "--max-batch", "8"]));
    let (status, video) = server.post(
        "/v1/videos",
        json!({"prompt": "a blue square moving right on a black background", "num_inference_steps": 10}),
    );
    assert_eq!(status, 200, "{video}");
    let dropped = [2usize, 7, 12];
    let body = move |i: usize| {
        let max_tokens = if dropped.contains(&i) { 200 } else { 4 + 3 * i };
        json!({"messages": [{"role": "user", "content": format!("request {i}")}], "max_tokens": max_tokens, "temperature": 0})
    };
    let threads: Vec<_> = (0..16)
        .map(|i| {
            let server = server.clone();
            std::thread::spawn(move || -> Option<String> {
                if dropped.contains(&i) {
                    let mut b = body(i);
                    b["stream"] = json!(true);
                    let r = ureq::post(&server.url("/v1/chat/completions")).send_json(&b).unwrap();
                    let lines = BufReader::new(r.into_body().into_reader()).lines();
                    for line in lines {
                        if line.unwrap().contains("\"content\":\"") {
                            break; // the client goes away after its first piece of text
                        }
                    }
                    return None;
                }
                let (status, v) = server.post("/v1/chat/completions", body(i));
                assert_eq!(status, 200, "{v}");
                Some(v["choices"][0]["message"]["content"].as_str().unwrap().to_string())
            })
        })
        .collect();
    let together: Vec<Option<String>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    for (i, got) in together.iter().enumerate() {
        let Some(got) = got else { continue };
        let (_, solo) = server.post("/v1/chat/completions", body(i));
        assert_eq!(got, solo["choices"][0]["message"]["content"].as_str().unwrap(), "request {i}: together = solo");
    }
    assert_eq!(server.wait_done(video["id"].as_str().unwrap())["status"], "completed");
    let t0 = Instant::now();
    loop {
        let m = server.metrics();
        let (free, total) =
            (metric(&m, "fastvideo_kv_blocks_free", None), metric(&m, "fastvideo_kv_blocks_total", None));
        if free == total && total > 0.0 {
            assert!(metric(&m, "fastvideo_requests_total", Some(("outcome", "cancelled"))) >= 3.0);
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "blocks still held: {free} of {total} free");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A key/value cache that holds two of these chats at a time: six sent at once all complete
/// (the others wait for room instead of failing), each with its solo text.
#[test]
fn chats_wait_for_room_when_the_cache_is_full() {
    use crate::common::server::{metric, Server};
    use serde_json::json;
    let lm_dir = lm();
    // 20 blocks of 16 positions (16 KiB each for this model); a chat takes 8 (≈ 30 + 100).
    let server = std::sync::Arc::new(Server::start(&["--lm", &lm_dir, "--lm-kv-cache", "320K", "--max-batch", "8"]));
    let body = |i: usize| json!({"messages": [{"role": "user", "content": format!("chat {i}")}], "max_tokens": 100, "temperature": 0});
    let threads: Vec<_> = (0..6)
        .map(|i| {
            let server = server.clone();
            std::thread::spawn(move || server.post("/v1/chat/completions", body(i)))
        })
        .collect();
    let together: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    for (i, (status, v)) in together.iter().enumerate() {
        assert_eq!(*status, 200, "chat {i}: {v}");
        let (_, solo) = server.post("/v1/chat/completions", body(i));
        assert_eq!(v["choices"][0]["message"]["content"], solo["choices"][0]["message"]["content"], "chat {i}");
    }
    let m = server.metrics();
    assert_eq!(metric(&m, "fastvideo_kv_blocks_total", None), 20.0);
    assert_eq!(metric(&m, "fastvideo_requests_total", Some(("outcome", "failed"))), 0.0);
}
