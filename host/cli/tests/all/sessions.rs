//! Live world-model sessions through `fastvideo serve`: the stream of frames, actions, plugin
//! parameters and exact mode, bad input, and freeing a session's slabs when its client goes.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common;
use crate::common::server::{metric, Server};

fn delete(server: &Server, path: &str) -> (u16, Value) {
    let r = ureq::delete(&server.url(path)).config().http_status_as_error(false).build().call().unwrap();
    let status = r.status().as_u16();
    (status, r.into_body().read_json().unwrap_or(Value::Null))
}

#[test]
fn a_world_session_streams_frames_takes_actions_and_frees_its_slabs_when_the_client_goes() {
    let server = Server::start(&["--world", "default", "--max-sessions", "2"]);
    let (status, s) = server.post("/v1/sessions", json!({"start_seed": 3}));
    assert_eq!(status, 200, "{s}");
    let id = s["id"].as_str().unwrap().to_string();
    assert_eq!((s["fps"].as_u64(), s["frames_per_chunk"].as_u64()), (Some(16), Some(4)));
    assert_eq!(s["actions"], json!(["none", "up", "down", "left", "right"]));
    let ws_url = server.url(&format!("/v1/sessions/{id}/stream")).replace("http://", "ws://");
    let (mut ws, _) = tungstenite::connect(ws_url.as_str()).unwrap();
    let hello: Value = serde_json::from_str(ws.read().unwrap().to_text().unwrap()).unwrap();
    assert_eq!(
        (hello["type"].as_str(), hello["width"].as_u64(), hello["height"].as_u64()),
        (Some("hello"), Some(64), Some(64))
    );
    let frame_len = 16 + 64 * 64 * 3;
    let mut frames: Vec<(u64, u64)> = Vec::new();
    let (mut sent, mut acked) = (false, false);
    while frames.len() < 60 {
        match ws.read().unwrap() {
            tungstenite::Message::Binary(b) => {
                assert_eq!(b.len(), frame_len);
                let pts = u64::from_le_bytes(b[0..8].try_into().unwrap());
                let action = u64::from_le_bytes(b[8..16].try_into().unwrap());
                frames.push((pts, action));
            }
            // The socket acknowledges the action it took (its id; `t` echoed, absent here).
            // Once the socket has taken action 5, a later one arrives over HTTP.
            tungstenite::Message::Text(t) => {
                let v: Value = serde_json::from_str(&t).unwrap();
                assert_eq!((v["type"].as_str(), v["id"].as_u64()), (Some("ack"), Some(5)), "{v}");
                acked = true;
                let (status, v) = server.post(&format!("/v1/sessions/{id}/actions"), json!({"action": "up", "id": 6}));
                assert_eq!(status, 200, "{v}");
            }
            other => panic!("unexpected message {other:?}"),
        }
        if frames.len() == 9 && !sent {
            ws.send(tungstenite::Message::text(json!({"type": "action", "action": "right", "id": 5}).to_string()))
                .unwrap();
            sent = true;
        }
    }
    assert!(acked, "the action sent on the socket was not acknowledged");
    // Presentation times advance one frame (1000/16 ms) at a time from 0.
    assert_eq!(frames[0].0, 0);
    assert!(frames.windows(2).all(|w| w[1].0 == w[0].0 + 62 || w[1].0 == w[0].0 + 63), "{frames:?}");
    // The actions apply from a later chunk, in order: none (0), then 5 or 6, ending at 6.
    assert!(frames[..9].iter().all(|f| f.1 == 0));
    assert_eq!(frames.last().unwrap().1, 6, "{frames:?}");
    let (status, info) = server.get(&format!("/v1/sessions/{id}"));
    assert_eq!(status, 200);
    assert!(info["chunks"].as_u64().unwrap() >= 15, "{info}");
    let m = server.metrics();
    assert_eq!(metric(&m, "fastvideo_sessions_live", None), 1.0);
    assert!(metric(&m, "fastvideo_kv_slabs_used", None) > 0.0);
    // A flush is answered (between frames) with how many unsent chunks it dropped.
    ws.send(tungstenite::Message::text(json!({"type": "flush"}).to_string())).unwrap();
    let flushed = loop {
        if let tungstenite::Message::Text(t) = ws.read().unwrap() {
            break serde_json::from_str::<Value>(&t).unwrap();
        }
    };
    assert_eq!(flushed["type"], "flushed", "{flushed}");
    assert!(flushed["chunks"].as_u64().is_some());
    // The client vanishes: the session closes and its slabs return.
    drop(ws);
    let t0 = Instant::now();
    loop {
        let m = server.metrics();
        let freed =
            metric(&m, "fastvideo_sessions_live", None) == 0.0 && metric(&m, "fastvideo_kv_slabs_used", None) == 0.0;
        if freed && server.get(&format!("/v1/sessions/{id}")).0 == 404 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "the session outlived its client");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until session `id` is gone (`true`) or `secs` pass while it stays live (`false`).
fn session_gone_within(server: &Server, id: &str, secs: u64) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(secs) {
        if server.get(&format!("/v1/sessions/{id}")).0 == 404 {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// Waits until session `id` has made `chunks` chunks; fails if it ends first.
fn session_makes_chunks(server: &Server, id: &str, chunks: u64) {
    let t0 = Instant::now();
    loop {
        let (status, info) = server.get(&format!("/v1/sessions/{id}"));
        assert_eq!(status, 200, "session {id} ended: {info}");
        if info["chunks"].as_u64().unwrap() >= chunks {
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "{info}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn sessions_take_plugin_params_and_exact_mode_as_jobs_do() {
    // A deploy whose guider (`misbehave`, which alters the distribution) fails its combine by
    // default; a request's `plugin_params` can tell it to behave.
    let wasm = &common::plugins()["fastvideo_testing_misbehave"];
    let hash = blake3::hash(&std::fs::read(wasm).unwrap()).to_hex().to_string();
    let dir = tempfile::tempdir().unwrap();
    let deploy = dir.path().join("deploy.toml");
    let text = format!(
        "[[plugins]]\nname = \"misbehave\"\nsource = \"{}\"\nblake3 = \"{hash}\"\ngrants = [\"tensor\", \"tensor-ops\", \"log\"]\nparams = {{ mode = \"error\" }}\n",
        wasm.display()
    );
    std::fs::write(&deploy, text).unwrap();
    let server = Server::start(&["--world", "default", "--max-sessions", "3", "--deploy", deploy.to_str().unwrap()]);
    // Parameters are checked against the plugin's schema before the session opens.
    let (status, e) = server.post("/v1/sessions", json!({"plugin_params": {"misbehave": {"mode": "dance"}}}));
    assert_eq!(status, 400, "{e}");
    assert_eq!(e["error"]["param"], "plugin_params.misbehave", "{e}");
    let (status, e) = server.post("/v1/sessions", json!({"plugin_params": {"nope": {}}}));
    assert_eq!(status, 400, "{e}");
    // The guider runs in the session's denoise steps: with the deploy's parameters it fails,
    // which ends that session (and no other).
    let (status, s) = server.post("/v1/sessions", json!({"start_seed": 1}));
    assert_eq!(status, 200, "{s}");
    let failing = s["id"].as_str().unwrap().to_string();
    // This session's own parameters override the deploy's: it runs.
    let (status, s) =
        server.post("/v1/sessions", json!({"start_seed": 1, "plugin_params": {"misbehave": {"mode": "ok"}}}));
    assert_eq!(status, 200, "{s}");
    let behaved = s["id"].as_str().unwrap().to_string();
    assert!(session_gone_within(&server, &failing, 30), "a session whose guider fails every step stayed live");
    session_makes_chunks(&server, &behaved, 3);
    // Exact mode: the distribution-altering guider is not called (built-in CFG instead), so the
    // deploy's failing default does no harm; and parameters for it are refused, as for a job.
    let (status, e) =
        server.post("/v1/sessions", json!({"exact": true, "plugin_params": {"misbehave": {"mode": "ok"}}}));
    assert_eq!((status, e["error"]["param"].as_str()), (400, Some("plugin_params.misbehave")), "{e}");
    let (status, s) = server.post("/v1/sessions", json!({"start_seed": 1, "exact": true}));
    assert_eq!(status, 200, "{s}");
    let exact = s["id"].as_str().unwrap().to_string();
    session_makes_chunks(&server, &exact, 3);
    for id in [behaved, exact] {
        assert_eq!(delete(&server, &format!("/v1/sessions/{id}")).0, 200);
    }
}

#[test]
fn bad_session_input_gets_a_4xx_naming_the_field() {
    let server = Server::start(&["--world", "default", "--max-sessions", "1"]);
    let (status, s) = server.post("/v1/sessions", json!({"seed": 1}));
    assert_eq!(status, 200, "{s}");
    let id = s["id"].as_str().unwrap();
    let (status, e) = server.post(&format!("/v1/sessions/{id}/actions"), json!({"action": "jump"}));
    assert_eq!(status, 400, "{e}");
    assert_eq!(e["error"]["param"], "key");
    assert!(e["error"]["message"].as_str().unwrap().contains("none, up, down, left, right"));
    // This model takes keys only: a continuous delta names the field.
    let (status, e) = server.post(&format!("/v1/sessions/{id}/actions"), json!({"key": "up", "delta": [1.0, 0.0]}));
    assert_eq!((status, e["error"]["param"].as_str()), (400, Some("delta")), "{e}");
    let (status, v) =
        server.post(&format!("/v1/sessions/{id}/actions"), json!({"key": "up", "from_frame": 40, "id": 2}));
    assert_eq!(status, 200, "{v}");
    let (status, e) = server.post("/v1/sessions", json!({}));
    assert_eq!((status, e["error"]["code"].as_str()), (429, Some("sessions_full")), "{e}");
    let (status, e) = server.post("/v1/sessions", json!({"windw": 3}));
    assert_eq!(status, 400, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("windw"), "{e}");
    let (status, _) = delete(&server, &format!("/v1/sessions/{id}"));
    assert_eq!(status, 200);
    // A window larger than the model's (the pool is sized for that) names the field.
    let (status, e) = server.post("/v1/sessions", json!({"window": 99}));
    assert_eq!((status, e["error"]["param"].as_str()), (400, Some("window")), "{e}");
    let (status, e) = server.post(&format!("/v1/sessions/{id}/actions"), json!({"action": "up"}));
    assert_eq!(status, 404, "{e}");
    assert_eq!(delete(&server, &format!("/v1/sessions/{id}")).0, 404);
    // The slot is free again.
    assert_eq!(server.post("/v1/sessions", json!({})).0, 200);
    let plain = Server::start(&[]);
    let (status, e) = plain.post("/v1/sessions", json!({}));
    assert_eq!((status, e["error"]["code"].as_str()), (400, Some("no_world_model")), "{e}");
}
