//! `fastvideo serve` with the shipped default model, driven by real clients: the official
//! `openai` Python package (from `.venv-client`, set up by `host/scripts/test.sh`), a plain HTTP
//! client, an SSE reader and a WebSocket client.

use std::io::Read;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common;
use crate::common::server::{metric, sse, Server};

fn video(prompt: &str, steps: u32) -> Value {
    json!({"prompt": prompt, "num_inference_steps": steps, "seed": 1})
}

#[test]
fn the_official_openai_client_creates_polls_downloads_and_generates_an_image() {
    // With an API key: the client sends it as a bearer token, unmodified.
    let server = Server::start(&["--api-key", "sk-test-0123456789"]);
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("openai.mp4");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/clients/openai_video.py");
    let out = Command::new(crate::common::client_python())
        .arg(script)
        .arg(&server.base)
        .arg(&out_path)
        .env("OPENAI_API_KEY", "sk-test-0123456789")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["model"], "fastvideo-default");
    assert_eq!(r["status"], "completed");
    let progress: Vec<u64> = r["progress"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    assert!(progress.windows(2).all(|w| w[0] <= w[1]), "progress went backwards: {progress:?}");
    assert_eq!(progress.last(), Some(&100));
    assert_eq!(r["mp4_ftyp"], "ftyp");
    assert_eq!(r["png_signature"], true);
    assert_eq!(r["bad_request"], json!({"status": 400, "param": "num_inference_steps"}));
    assert!(r["listed"].as_array().unwrap().contains(&r["id"]));
    // The downloaded file is a real MP4 with the requested frames.
    let bytes = std::fs::read(&out_path).unwrap();
    assert_eq!(bytes.len() as u64, r["mp4_bytes"].as_u64().unwrap());
    let mp4 = mp4::Mp4Reader::read_header(std::io::Cursor::new(&bytes), bytes.len() as u64).unwrap();
    let track = mp4.tracks().values().next().unwrap();
    assert_eq!((track.width(), track.height(), track.sample_count()), (64, 64, 17));
}

#[test]
fn sse_streams_a_progress_event_for_every_denoise_step() {
    let server = Server::start(&[]);
    let (status, v) = server.post("/v1/videos", video("a green triangle moving up on a gray background", 7));
    assert_eq!(status, 200, "{v}");
    let id = v["id"].as_str().unwrap();
    let events = sse(&server, id, |_, _| {});
    let steps: Vec<u64> =
        events.iter().filter(|(n, _)| n == "progress").map(|(_, v)| v["step"].as_u64().unwrap()).collect();
    assert_eq!(steps, (1..=7).collect::<Vec<_>>());
    assert_eq!(events.last().unwrap().0, "done");
    // `done` is sent once the MP4 is stored: the content is there right away.
    let r = ureq::get(&server.url(&format!("/v1/videos/{id}/content"))).call().unwrap();
    assert_eq!(r.headers().get("content-type").unwrap(), "video/mp4");
    // A late subscriber gets the whole history.
    assert_eq!(sse(&server, id, |_, _| {}).len(), events.len());
}

#[test]
fn websocket_submits_a_job_and_streams_events_then_the_mp4() {
    let server = Server::start(&[]);
    let ws_url = server.url("/v1/stream").replacen("http://", "ws://", 1);
    let (mut ws, _) = tungstenite::connect(ws_url.as_str()).unwrap();
    let create = json!({"type": "create", "params": video("a red circle moving right on a white background", 5)});
    ws.send(tungstenite::Message::text(create.to_string())).unwrap();
    ws.send(tungstenite::Message::text(r#"{"type":"create","params":{"prompt":"x","num_frames":6}}"#)).unwrap();
    let mut kinds = Vec::new();
    let mut bad_param = None;
    let mut mp4 = None;
    while mp4.is_none() {
        match ws.read().unwrap() {
            tungstenite::Message::Text(t) => {
                let v: Value = serde_json::from_str(&t).unwrap();
                if v["type"] == "error" && v.get("error").is_some() {
                    bad_param = v["error"]["param"].as_str().map(str::to_string);
                }
                kinds.push(v["type"].as_str().unwrap().to_string());
            }
            tungstenite::Message::Binary(b) => mp4 = Some(b),
            _ => {}
        }
    }
    assert_eq!(kinds[0], "created");
    assert_eq!(bad_param.as_deref(), Some("num_frames"));
    assert_eq!(kinds.iter().filter(|k| *k == "progress").count(), 5);
    let done = kinds.iter().position(|k| k == "done").expect("a done event");
    assert_eq!(kinds.last().map(String::as_str), Some("content"));
    assert!(done < kinds.len() - 1);
    assert_eq!(&mp4.unwrap()[4..8], b"ftyp");
}

#[test]
fn delete_cancels_a_running_job_within_one_step_and_frees_it() {
    let server = Server::start(&[]);
    let (_, v) = server.post("/v1/videos", video("a blue star spinning on a black background", 400));
    let id = v["id"].as_str().unwrap().to_string();
    let mut deleted_at = None;
    let mut after = 0;
    let events = sse(&server, &id, |name, v| {
        if name == "progress" {
            if deleted_at.is_some() {
                after += 1;
            } else if v["step"] == 3 {
                let r = ureq::delete(&server.url(&format!("/v1/videos/{id}"))).call().unwrap();
                let body: Value = r.into_body().read_json().unwrap();
                assert_eq!(body["deleted"], true);
                assert_eq!(body["cancelled"], true);
                deleted_at = Some(3);
            }
        }
    });
    // At most one step runs after the cancel reaches the engine (tested exactly in
    // host/engine/tests/engine.rs); a few more may already be on the wire to this client.
    assert!(after <= 3, "{after} progress events arrived after the DELETE answer");
    let (name, last) = events.last().unwrap();
    assert_eq!((name.as_str(), last["code"].as_str()), ("error", Some("cancelled")));
    assert_eq!(server.get(&format!("/v1/videos/{id}")).0, 404);
    let m = server.metrics();
    assert_eq!(metric(&m, "fastvideo_in_flight", None), 0.0);
    assert_eq!(metric(&m, "fastvideo_requests_total", Some(("outcome", "cancelled"))), 1.0);
}

#[test]
fn fifty_concurrent_mixed_requests_complete_once_each_and_metrics_move() {
    let server = Server::start(&["--max-active", "8", "--max-batch", "8"]);
    let before = server.metrics();
    let ids: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..50)
            .map(|i| {
                let server = &server;
                s.spawn(move || {
                    let frames = [1, 5, 9][i % 3];
                    let body = json!({"prompt": "a yellow square moving down on a white background",
                        "num_inference_steps": 1 + i % 5, "num_frames": frames, "seed": i});
                    let (status, v) = server.post("/v1/videos", body);
                    assert_eq!(status, 200, "{v}");
                    v["id"].as_str().unwrap().to_string()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let unique: std::collections::BTreeSet<_> = ids.iter().collect();
    assert_eq!(unique.len(), 50);
    for id in &ids {
        let v = server.wait_done(id);
        assert_eq!(v["status"], "completed", "{v}");
        let mut body = Vec::new();
        ureq::get(&server.url(&format!("/v1/videos/{id}/content")))
            .call()
            .unwrap()
            .into_body()
            .into_reader()
            .read_to_end(&mut body)
            .unwrap();
        assert_eq!(&body[4..8], b"ftyp");
    }
    let (_, list) = server.get("/v1/videos?limit=100&order=asc");
    let listed: Vec<&str> = list["data"].as_array().unwrap().iter().map(|v| v["id"].as_str().unwrap()).collect();
    let listed_set: std::collections::BTreeSet<&str> = listed.iter().copied().collect();
    assert_eq!(listed_set, ids.iter().map(String::as_str).collect());
    assert_eq!(listed.len(), 50);
    let after = server.metrics();
    let completed = |m| metric(m, "fastvideo_requests_total", Some(("outcome", "completed")));
    assert_eq!(completed(&after) - completed(&before), 50.0);
    // One prompt and one negative prompt for all 50: encoded once each, then served from cache.
    let cache = |m, what| metric(m, &format!("fastvideo_embedding_cache_{what}_total"), None);
    assert_eq!(cache(&after, "misses") - cache(&before, "misses"), 2.0);
    assert_eq!(cache(&after, "hits") - cache(&before, "hits"), 98.0);
    let steps: f64 = (0..50).map(|i| (1 + i % 5) as f64).sum();
    assert_eq!(metric(&after, "fastvideo_step_seconds_count", None), steps);
    // Requests of one shape run some of their steps as one batched forward. Each job here has
    // fewer steps than the one before, so under shortest-remaining each arrival is started at
    // once beside the running ones (a burst of equal jobs runs one after the other unless they
    // happen to arrive together, which a loaded machine does not promise).
    let long: Vec<String> = [40, 34, 28, 22, 16, 10]
        .iter()
        .enumerate()
        .map(|(i, steps)| {
            let body = json!({"prompt": "a yellow square moving down on a white background",
                "num_inference_steps": steps, "num_frames": 5, "seed": 100 + i});
            let (status, v) = server.post("/v1/videos", body);
            assert_eq!(status, 200, "{v}");
            v["id"].as_str().unwrap().to_string()
        })
        .collect();
    for id in &long {
        assert_eq!(server.wait_done(id)["status"], "completed");
    }
    assert!(metric(&server.metrics(), "fastvideo_step_batch_size_count", None) > 0.0);
}

#[test]
fn malformed_requests_get_a_400_naming_the_field() {
    let server = Server::start(&[]);
    let cases = [
        (json!({"prompt": "p", "num_inference_steps": "x"}), "num_inference_steps"),
        (json!({"prompt": "p", "stepz": 3}), "stepz"),
        (json!({"num_inference_steps": 3}), "prompt"),
        (json!({"prompt": "p", "num_frames": 6}), "num_frames"),
        (json!({"prompt": "p", "size": "huge"}), "size"),
        (json!({"prompt": "p", "model": "sora-2"}), "model"),
        (json!({"prompt": "p", "plugin_params": {"apg": {"eta": 1}}}), "plugin_params"),
        // The CPU server runs `exact`; a client expecting another preset is told, not served.
        (json!({"prompt": "p", "precision": "fast"}), "precision"),
        // Would overflow the frame count if multiplied out in integers.
        (json!({"prompt": "p", "seconds": 1e300}), "seconds"),
        // The default model makes no sound.
        (json!({"prompt": "p", "generate_sound": true}), "generate_sound"),
    ];
    for (body, field) in cases {
        let (status, v) = server.post("/v1/videos", body.clone());
        assert_eq!(status, 400, "{body} -> {v}");
        assert_eq!(v["error"]["param"], field, "{body} -> {v}");
        assert!(v["error"]["message"].as_str().unwrap().contains(field), "{v}");
    }
    let r = ureq::post(&server.url("/v1/videos"))
        .config()
        .http_status_as_error(false)
        .build()
        .content_type("application/json")
        .send("{not json")
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    // A form field name nested 100,000 brackets deep (it once overflowed the stack and killed
    // the process): a 400 naming the field, and the server stays up.
    let boundary = "fvboundary";
    let form = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"prompt\"\r\n\r\np\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"plugin_params{}\"\r\n\r\n1\r\n--{boundary}--\r\n",
        "[a]".repeat(100_000)
    );
    let r = ureq::post(&server.url("/v1/videos"))
        .config()
        .http_status_as_error(false)
        .build()
        .content_type(format!("multipart/form-data; boundary={boundary}"))
        .send(form.as_str())
        .unwrap();
    let status = r.status().as_u16();
    let v: Value = r.into_body().read_json().unwrap();
    assert_eq!((status, v["error"]["param"].as_str()), (400, Some("plugin_params")), "{v}");
    assert_eq!(server.get("/v1/videos/video_nope").0, 404);
    // Refused before our handlers: still a JSON error with the right status.
    let raw = |method: &str, path: &str| {
        let r = ureq::http::Request::builder().method(method).uri(server.url(path)).body(()).unwrap();
        let r = ureq::Agent::config_builder().http_status_as_error(false).build().new_agent().run(r).unwrap();
        let status = r.status().as_u16();
        (status, r.into_body().read_json::<Value>().unwrap_or(Value::Null))
    };
    for (method, path, want, code) in [
        ("GET", "/v1/videos?limit=abc", 400, "invalid_request"),
        ("GET", "/v1/videos?limit=1&limit=2", 400, "invalid_request"),
        ("PUT", "/v1/videos", 405, "method_not_allowed"),
        ("GET", "/v1/videos/%FF%FE", 400, "invalid_request"),
    ] {
        let (status, v) = raw(method, path);
        assert_eq!((status, v["error"]["code"].as_str()), (want, Some(code)), "{method} {path}: {v}");
        assert!(!v["error"]["message"].as_str().unwrap_or_default().is_empty(), "{method} {path}: {v}");
    }
    assert_eq!(server.get("/health").0, 200);
    assert_eq!(server.get("/ready").0, 200);
    // Nothing was admitted.
    assert_eq!(metric(&server.metrics(), "fastvideo_requests_total", Some(("outcome", "completed"))), 0.0);
    // Sibling images of the largest seed take the next seeds, wrapping (it overflowed before).
    let (status, v) = server
        .post("/v1/images/generations", json!({"prompt": "p", "n": 2, "seed": u64::MAX, "num_inference_steps": 2}));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["data"].as_array().map(Vec::len), Some(2), "{v}");
    assert_eq!((v["data"][0]["seed"].as_u64(), v["data"][1]["seed"].as_u64()), (Some(u64::MAX), Some(0)));
}

#[test]
fn a_deploy_runs_its_plugins_per_request_streams_observer_events_and_meters_time() {
    let built = common::plugins();
    let entry = |name: &str, stem: &str, grants: &str| {
        let wasm = &built[stem];
        let hash = blake3::hash(&std::fs::read(wasm).unwrap()).to_hex().to_string();
        format!(
            "[[plugins]]\nname = \"{name}\"\nsource = \"{}\"\nblake3 = \"{hash}\"\ngrants = {grants}\n",
            wasm.display()
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let deploy = dir.path().join("deploy.toml");
    let text = entry("cfg", "fastvideo_guider_cfg", r#"["tensor", "tensor-ops"]"#)
        + &entry("profiler", "fastvideo_observer_profiler", r#"["tensor", "events", "clock"]"#);
    std::fs::write(&deploy, text).unwrap();
    let server = Server::start(&["--deploy", deploy.to_str().unwrap()]);
    let (status, v) = server.post("/v1/videos", video("a red circle moving left on a white background", 3));
    assert_eq!(status, 200, "{v}");
    let id = v["id"].as_str().unwrap();
    assert_eq!(server.wait_done(id)["status"], "completed");
    assert!(metric(&server.metrics(), "fastvideo_plugin_seconds_total", None) > 0.0);
    // The observer's events reach the request's SSE stream (replayed to a late subscriber).
    let events = sse(&server, id, |_, _| {});
    let plugin: Vec<&Value> = events.iter().filter(|(n, _)| n == "plugin").map(|(_, v)| v).collect();
    let named = |n: &str| plugin.iter().filter(|v| v["name"] == n).count();
    assert_eq!(named("profiler.step"), 3, "{plugin:?}");
    assert_eq!(named("profiler.summary"), 1, "{plugin:?}");
    assert!(plugin.iter().all(|v| v["plugin"] == "profiler" && v["request_id"] == id));
    let (name, done) = events.last().unwrap();
    assert_eq!(name, "done");
    assert!(done["metrics"]["plugin_seconds"].as_f64().unwrap() > 0.0, "{done}");
    let mut bad = video("x", 3);
    bad["plugin_params"] = json!({"nope": {"a": 1}});
    let (status, v) = server.post("/v1/videos", bad);
    assert_eq!((status, v["error"]["param"].as_str()), (400, Some("plugin_params.nope")), "{v}");
}

#[test]
fn sigterm_drains_admitted_work_then_exits() {
    let mut server = Server::start(&[]);
    let (_, v) = server.post("/v1/videos", video("a purple cross moving down on a gray background", 60));
    let id = v["id"].as_str().unwrap().to_string();
    let pid = server.child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    // Draining: not ready, no new work, but the admitted job finishes and stays downloadable.
    let t0 = Instant::now();
    while server.get("/ready").0 != 503 {
        assert!(t0.elapsed() < Duration::from_secs(10), "/ready never turned 503");
        std::thread::sleep(Duration::from_millis(10));
    }
    let (status, body) = server.post("/v1/videos", video("x", 2));
    assert_eq!((status, body["error"]["code"].as_str()), (503, Some("draining")), "{body}");
    assert_eq!(server.wait_done(&id)["status"], "completed");
    let status = server.child.wait().unwrap();
    assert!(status.success(), "the server exits cleanly after the drain: {status}");
}

#[test]
fn with_api_keys_every_job_route_needs_one_and_probes_stay_open() {
    let server = Server::start(&["--api-key", "first-key-123", "--api-key", "second-key-456", "--world", "default"]);
    let call = |method: &str, path: &str, key: Option<&str>| {
        let mut r = ureq::http::Request::builder().method(method).uri(server.url(path));
        if let Some(k) = key {
            r = r.header("authorization", format!("Bearer {k}"));
        }
        let body = if method == "POST" { r#"{"prompt": "p", "num_inference_steps": 1}"# } else { "" };
        let r = r.header("content-type", "application/json").body(body.to_string()).unwrap();
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .allow_non_standard_methods(true)
            .build()
            .new_agent();
        let r = agent.run(r).unwrap();
        let status = r.status().as_u16();
        let www = r.headers().get("www-authenticate").map(|v| v.to_str().unwrap().to_string());
        (status, www, r.into_body().read_json::<Value>().unwrap_or(Value::Null))
    };
    for (method, path) in [
        ("POST", "/v1/videos"),
        ("GET", "/v1/videos"),
        ("GET", "/v1/videos/video_x"),
        ("DELETE", "/v1/videos/video_x"),
        ("GET", "/v1/videos/video_x/content"),
        ("GET", "/v1/videos/video_x/events"),
        ("POST", "/v1/images/generations"),
        ("GET", "/v1/models"),
        ("GET", "/metrics"),
        ("GET", "/v1/nope"),
    ] {
        for key in [None, Some("wrong-key-789")] {
            let (status, www, v) = call(method, path, key);
            assert_eq!(
                (status, v["error"]["code"].as_str()),
                (401, Some("invalid_api_key")),
                "{method} {path} {key:?}: {v}"
            );
            assert_eq!(www.as_deref(), Some("Bearer"));
        }
    }
    // Either key works; the probes need none.
    let (status, _, v) = call("POST", "/v1/videos", Some("second-key-456"));
    assert_eq!(status, 200, "{v}");
    // The job is the second key's: the first sees it as not found, in every route and the list.
    let id = v["id"].as_str().unwrap().to_string();
    for (method, path) in [
        ("GET", format!("/v1/videos/{id}")),
        ("GET", format!("/v1/videos/{id}/events")),
        ("DELETE", format!("/v1/videos/{id}")),
    ] {
        let (status, _, v) = call(method, &path, Some("first-key-123"));
        assert_eq!(status, 404, "{method} {path} with another key: {v}");
    }
    let listed = |key| {
        call("GET", "/v1/videos", Some(key)).2["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["id"].clone())
            .collect::<Vec<_>>()
    };
    assert!(listed("first-key-123").is_empty());
    assert_eq!(listed("second-key-456"), [json!(id)]);
    assert_eq!(call("GET", &format!("/v1/videos/{id}"), Some("second-key-456")).0, 200);
    // World sessions too: only the key that opened one can see, act on, stream or close it.
    let r = ureq::post(&server.url("/v1/sessions"))
        .header("authorization", "Bearer first-key-123")
        .send_json(json!({}))
        .unwrap();
    let sid = r.into_body().read_json::<Value>().unwrap()["id"].as_str().unwrap().to_string();
    for (method, path) in [("GET", format!("/v1/sessions/{sid}")), ("DELETE", format!("/v1/sessions/{sid}"))] {
        let (status, _, v) = call(method, &path, Some("second-key-456"));
        assert_eq!(status, 404, "{method} {path} with another key: {v}");
    }
    let ws = |key: &str| {
        let url = server.url(&format!("/v1/sessions/{sid}/stream?api_key={key}")).replace("http://", "ws://");
        match tungstenite::connect(url.as_str()) {
            Ok(_) => 101,
            Err(tungstenite::Error::Http(r)) => r.status().as_u16(),
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!(ws("second-key-456"), 404, "another key's session stream");
    assert_eq!(ws("wrong-key-789"), 401);
    assert_eq!(call("GET", &format!("/v1/sessions/{sid}"), Some("first-key-123")).0, 200);
    assert_eq!(call("DELETE", &format!("/v1/sessions/{sid}"), Some("first-key-123")).0, 200);
    assert_eq!(call("GET", "/v1/models", Some("first-key-123")).0, 200);
    assert_eq!(call("GET", "/health", None).0, 200);
    assert_eq!(call("GET", "/ready", None).0, 200);
    // A short key is refused at start, naming the flag.
    let out = Command::new(env!("CARGO_BIN_EXE_fastvideo"))
        .args(["serve", "--port", "0", "--api-key", "short"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--api-key"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Waits until the server closes `conn` (EOF or reset); how long that took.
fn closed_within(conn: &mut std::net::TcpStream, limit: Duration) -> Duration {
    conn.set_read_timeout(Some(limit)).unwrap();
    let t0 = Instant::now();
    let mut buf = [0u8; 1024];
    loop {
        match conn.read(&mut buf) {
            Ok(0) | Err(_) if t0.elapsed() < limit => return t0.elapsed(),
            Ok(0) | Err(_) => panic!("the connection was still open after {limit:?}"),
            // A 408 may come first; the close follows.
            Ok(_) => continue,
        }
    }
}

#[test]
fn half_sent_requests_are_cut_off_and_cannot_hold_the_process_after_a_drain() {
    use std::io::Write;
    let server = Server::start(&["--header-timeout", "1"]);
    let addr = server.base.trim_start_matches("http://").to_string();
    // Half a header, then nothing: closed at the header timeout, and the server serves on.
    let mut slow: Vec<std::net::TcpStream> = (0..20)
        .map(|_| {
            let mut c = std::net::TcpStream::connect(&addr).unwrap();
            c.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow:").unwrap();
            c
        })
        .collect();
    for c in &mut slow {
        let took = closed_within(c, Duration::from_secs(5));
        assert!(took < Duration::from_secs(5), "{took:?}");
    }
    // A head with a body that never comes: 408 with a JSON error at the body deadline.
    let server_b = Server::start(&["--body-timeout", "1"]);
    let mut c = std::net::TcpStream::connect(server_b.base.trim_start_matches("http://")).unwrap();
    c.write_all(
        b"POST /v1/videos HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"pro",
    )
    .unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut reply = String::new();
    let _ = c.read_to_string(&mut reply);
    assert!(reply.starts_with("HTTP/1.1 408") && reply.contains("\"error\""), "{reply}");
    drop(server_b);
    // A connection that never sends a byte is closed too.
    let mut silent = std::net::TcpStream::connect(&addr).unwrap();
    closed_within(&mut silent, Duration::from_secs(5));
    assert_eq!(server.get("/health").0, 200);

    // With a long header timeout, a half-sent request is still open when SIGTERM comes: the
    // process exits within the drain timeout plus the connections' close grace anyway.
    let mut server = Server::start(&["--header-timeout", "120", "--drain-timeout", "1"]);
    let addr = server.base.trim_start_matches("http://").to_string();
    let mut c = std::net::TcpStream::connect(&addr).unwrap();
    c.write_all(b"POST /v1/videos HTTP/1.1\r\nHost: x\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let pid = server.child.id().to_string();
    let t0 = Instant::now();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let status = server.child.wait().unwrap();
    assert!(status.success(), "{status}");
    // The drain's own pauses (≈0.5 s) + close grace (2 s), with room for a loaded machine.
    assert!(t0.elapsed() < Duration::from_secs(8), "exit took {:?} with a half-sent request open", t0.elapsed());
}

#[test]
fn previews_stream_every_n_steps_and_stay_out_of_the_history() {
    use base64::Engine as _;
    let server = Server::start(&[]);
    // Enough steps that the stream is open before the first preview (they are live only).
    let mut body = video("a red circle moving left on a white background", 12);
    body["preview_every"] = json!(0);
    let (status, v) = server.post("/v1/videos", body.clone());
    assert_eq!((status, v["error"]["param"].as_str()), (400, Some("preview_every")), "{v}");
    body["preview_every"] = json!(4);
    let (status, v) = server.post("/v1/videos", body);
    assert_eq!(status, 200, "{v}");
    let id = v["id"].as_str().unwrap();
    let events = sse(&server, id, |_, _| {});
    let previews: Vec<&Value> = events.iter().filter(|(n, _)| n == "preview").map(|(_, v)| v).collect();
    assert_eq!(previews.iter().map(|p| p["step"].as_u64().unwrap()).collect::<Vec<_>>(), [4, 8, 12]);
    for p in &previews {
        assert_eq!((p["width"].as_u64(), p["height"].as_u64()), (Some(64), Some(64)), "{p}");
        let jpeg = base64::engine::general_purpose::STANDARD.decode(p["jpeg_b64"].as_str().unwrap()).unwrap();
        assert!(jpeg.starts_with(&[0xFF, 0xD8]) && jpeg.ends_with(&[0xFF, 0xD9]), "a JPEG");
    }
    // A late subscriber gets the history, which keeps no previews.
    let later = sse(&server, id, |_, _| {});
    assert!(later.iter().all(|(n, _)| n != "preview"));
    assert!(later.iter().any(|(n, _)| n == "done"));
}
