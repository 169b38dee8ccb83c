//! Several models on one device: a second model picked by `model`, a bound on how many are
//! resident, the two tiers sleeping weights go to, and models pinned to the device.

use serde_json::{json, Value};

use crate::common::server::{metric, Server};

fn video(prompt: &str, steps: u32) -> Value {
    json!({"prompt": prompt, "num_inference_steps": steps, "seed": 1})
}

#[test]
fn three_models_share_a_device_that_holds_two() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/default");
    let spec = |name: &str| format!("{name}={}", dir.display());
    let (a, b, c) = (spec("a"), spec("b"), spec("c"));
    // Both tiers: weights that sleep in host memory, and weights freed and read from disk again.
    for tier in ["disk", "host"] {
        let args = ["--model", &a, "--model", &b, "--model", &c, "--max-resident-models", "2", "--sleep-to", tier];
        let server = Server::start(&args);
        let mut ids = Vec::new();
        for (i, model) in ["b", "c", "a", "b", "c", "a"].iter().enumerate() {
            let mut body = video("a blue square moving right on a black background", 3);
            body["model"] = json!(model);
            body["seed"] = json!(7);
            let (status, v) = server.post("/v1/videos", body);
            assert_eq!(status, 200, "{tier} request {i}: {v}");
            ids.push(v["id"].as_str().unwrap().to_string());
        }
        let mut videos = Vec::new();
        for id in &ids {
            assert_eq!(server.wait_done(id)["status"], "completed", "{tier} {id}");
            videos.push(server.bytes(&format!("/v1/videos/{id}/content")).1);
        }
        // Weights that slept and woke make the same video as ones that never left.
        assert!(videos.windows(2).all(|w| w[0] == w[1]), "{tier}: the same seed gives the same video on every model");
        let m = server.metrics();
        // `c` sleeps from the start; its requests run after the resident models' (the wake
        // cost counts in their predicted work) and wake it at least once.
        let wakes = metric(&m, "fastvideo_model_wakes_total", None);
        assert!(wakes >= 1.0, "{tier}: models were swapped in ({wakes})");
        let resident = metric(&m, "fastvideo_model_resident", None);
        assert!(resident <= 2.0, "{tier}: {resident} models on the device");
        if tier == "disk" {
            // A model asleep on disk wakes by hand too, and still makes the same video.
            assert_eq!(server.post("/v1/models/b/sleep", json!({})).0, 200);
            assert_eq!(server.post("/v1/models/b/wake", json!({})).0, 200);
            let mut body = video("a blue square moving right on a black background", 3);
            (body["model"], body["seed"]) = (json!("b"), json!(7));
            let id = server.post("/v1/videos", body).1["id"].as_str().unwrap().to_string();
            assert_eq!(server.wait_done(&id)["status"], "completed");
            assert_eq!(server.bytes(&format!("/v1/videos/{id}/content")).1, videos[0]);
            continue;
        }
        let (status, v) = server.post("/v1/models/b/sleep", json!({}));
        assert_eq!((status, &v["resident"]), (200, &json!(false)), "{v}");
        let (status, v) = server.post("/v1/models/b/wake", json!({}));
        assert_eq!((status, &v["resident"]), (200, &json!(true)), "{v}");
        assert_eq!(server.post("/v1/models/a/sleep", json!({})).0, 409, "the primary keeps its weights");
        assert_eq!(server.post("/v1/models/nope/wake", json!({})).0, 404);
    }
}

#[test]
fn a_pinned_model_never_sleeps_and_an_unknown_pin_is_refused() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/default");
    let spec = |name: &str| format!("{name}={}", dir.display());
    let (a, b, c) = (spec("a"), spec("b"), spec("c"));
    let args = ["--model", &a, "--model", &b, "--model", &c, "--max-resident-models", "2", "--pin-model", "b"];
    let server = Server::start(&args);
    let (status, v) = server.post("/v1/models/b/sleep", json!({}));
    assert_eq!(status, 409, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("cannot sleep"), "{v}");
    // With the primary and `b` kept, `c` is the one asleep.
    let m = server.metrics();
    assert_eq!(metric(&m, "fastvideo_model_resident", Some(("model", "c"))), 0.0);
    assert_eq!(metric(&m, "fastvideo_model_resident", Some(("model", "b"))), 1.0);
    drop(server);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fastvideo"))
        .args(["serve", "--model", &a, "--model", &b, "--pin-model", "zzz", "--port", "0"])
        .output()
        .unwrap();
    crate::common::assert_user_error(&out, "--pin-model `zzz`");
}

#[test]
fn a_second_model_is_served_beside_the_first_and_picked_by_model() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/default");
    let (main, copy) = (format!("main={}", dir.display()), format!("copy={}", dir.display()));
    let server = Server::start(&["--model", &main, "--model", &copy]);
    let ids: Vec<Value> =
        server.get("/v1/models").1["data"].as_array().unwrap().iter().map(|m| m["id"].clone()).collect();
    assert_eq!(ids, [json!("main"), json!("copy")]);
    let caps = server.get("/v1/capabilities").1;
    let models: Vec<(Value, Value)> =
        caps["data"].as_array().unwrap().iter().map(|m| (m["model"].clone(), m["primary"].clone())).collect();
    assert_eq!(models, [(json!("main"), json!(true)), (json!("copy"), json!(false))], "{caps}");
    let mut videos = Vec::new();
    for model in [None, Some("copy")] {
        let mut body = video("a green triangle moving up on a gray background", 3);
        if let Some(m) = model {
            body["model"] = json!(m);
        }
        let (status, v) = server.post("/v1/videos", body);
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["model"], json!(model.unwrap_or("main")));
        let id = v["id"].as_str().unwrap().to_string();
        assert_eq!(server.wait_done(&id)["status"], "completed");
        videos.push(server.bytes(&format!("/v1/videos/{id}/content")).1);
    }
    assert_eq!(videos[0], videos[1], "the same weights and seed give the same video on either model");
    let mut body = video("a green triangle", 3);
    body["model"] = json!("nope");
    let (status, v) = server.post("/v1/videos", body);
    assert_eq!((status, v["error"]["param"].as_str()), (400, Some("model")), "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("`main`, `copy`"), "{v}");
}

/// `metric` of one model.
fn of(m: &prometheus_parse::Scrape, name: &str, model: &str) -> f64 {
    metric(m, name, Some(("model", model)))
}

#[test]
fn a_weight_budget_holds_the_world_model_and_a_lazy_copy_in_turn() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/default");
    let (a, b) = (format!("a={}", dir.display()), format!("b={}", dir.display()));
    // The primary never sleeps; 18 MiB hold it (8.6 MiB of linears in float32) and either the
    // copy (the same) or the world model (as large), not both.
    let args = ["--model", &a, "--model", &b, "--lazy-model", "b", "--world", "default", "--weight-budget-mib", "18"];
    let server = Server::start(&args);
    let m = server.metrics();
    assert_eq!(of(&m, "fastvideo_model_resident", "b"), 0.0, "the lazy copy starts asleep");
    assert_eq!(of(&m, "fastvideo_model_resident", "world"), 1.0);
    assert_eq!(metric(&m, "fastvideo_model_wakes_total", None), 0.0, "and was never read");
    let world_bytes = metric(&m, "fastvideo_resident_weight_bytes", None);
    assert!(world_bytes > 0.0);

    let run_b = || {
        let mut body = video("a blue square moving right on a black background", 3);
        body["model"] = json!("b");
        let (status, v) = server.post("/v1/videos", body);
        assert_eq!(status, 200, "{v}");
        let id = v["id"].as_str().unwrap().to_string();
        assert_eq!(server.wait_done(&id)["status"], "completed");
        server.bytes(&format!("/v1/videos/{id}/content")).1
    };
    let first = run_b();
    let m = server.metrics();
    assert_eq!(of(&m, "fastvideo_model_resident", "b"), 1.0, "read at its first request");
    assert_eq!(of(&m, "fastvideo_model_resident", "world"), 0.0, "the world model made room");
    // One model's weights beside the primary's, never two.
    let copy_bytes = metric(&m, "fastvideo_resident_weight_bytes", None);
    assert!(copy_bytes > 0.0 && copy_bytes < 10.0 * 1048576.0, "{copy_bytes}");

    // A causal job brings the world model back and puts the copy to sleep.
    let (status, v) = server.post("/v1/videos", json!({"model": "world", "actions": ["right"], "seed": 3}));
    assert_eq!(status, 200, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    assert_eq!(server.wait_done(&id)["status"], "completed");
    let m = server.metrics();
    assert_eq!(of(&m, "fastvideo_model_resident", "world"), 1.0);
    assert_eq!(of(&m, "fastvideo_model_resident", "b"), 0.0);
    assert_eq!(metric(&m, "fastvideo_resident_weight_bytes", None), world_bytes);

    // The copy again, from host memory this time: the same video.
    assert_eq!(run_b(), first, "weights that slept make the same video");
    assert!(metric(&server.metrics(), "fastvideo_model_wakes_total", None) >= 3.0);
    // The world model sleeps and wakes by name, too.
    assert_eq!(server.post("/v1/models/b/sleep", json!({})).0, 200);
    assert_eq!(server.post("/v1/models/world/wake", json!({})).1["resident"], json!(true));
    drop(server);

    let refused = |extra: &[&str], says: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_fastvideo"))
            .args(["serve", "--model", &a, "--model", &b, "--port", "0"])
            .args(extra)
            .output()
            .unwrap();
        crate::common::assert_user_error(&out, says);
    };
    // 9 MiB hold the primary but not the copy beside it.
    refused(&["--weight-budget-mib", "9"], "--weight-budget-mib) 9: `b` needs");
    refused(&["--weight-budget-mib", "4"], "the weights that never sleep take");
    refused(&["--lazy-model", "zzz"], "--lazy-model `zzz`");
    refused(&["--lazy-model", "b", "--pin-model", "b"], "exclude each other");
}
