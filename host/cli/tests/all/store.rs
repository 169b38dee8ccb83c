//! The durable job store: a `fastvideo serve` killed with SIGKILL mid-load and started again on
//! the same `--data-dir` still has every job — finished ones byte-identical, unfinished ones run
//! again or failed with `server_restarted`, none silently gone — and expired or over-budget
//! videos are handled as documented.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::server::{sse, Server};

fn video(prompt: &str, steps: u32, seed: u64) -> Value {
    json!({"prompt": prompt, "num_inference_steps": steps, "seed": seed})
}

fn submit(server: &Server, steps: u32, seed: u64) -> String {
    let (status, v) = server.post("/v1/videos", video("a blue square moving left on a white background", steps, seed));
    assert_eq!(status, 200, "{v}");
    v["id"].as_str().unwrap().to_string()
}

fn listed(server: &Server) -> Vec<String> {
    let (status, v) = server.get("/v1/videos?limit=100&order=asc");
    assert_eq!(status, 200, "{v}");
    v["data"].as_array().unwrap().iter().map(|j| j["id"].as_str().unwrap().to_string()).collect()
}

fn wait_running(server: &Server, id: &str) {
    let t0 = Instant::now();
    while server.get(&format!("/v1/videos/{id}")).1["status"] == "queued" {
        assert!(t0.elapsed() < Duration::from_secs(120), "{id} never started");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_sigkilled_server_restarts_with_every_job() {
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().to_str().unwrap();
    let a = Server::start(&["--data-dir", dir]);
    let done: Vec<String> = (0..3).map(|i| submit(&a, 2, i)).collect();
    let mut kept = Vec::new();
    for id in &done {
        assert_eq!(a.wait_done(id)["status"], "completed");
        let (status, bytes) = a.bytes(&format!("/v1/videos/{id}/content"));
        assert_eq!(status, 200);
        kept.push(bytes);
    }
    let events_before = sse(&a, &done[0], |_, _| {});
    let running: Vec<String> = (0..3).map(|i| submit(&a, 40, 10 + i)).collect();
    wait_running(&a, &running[0]);
    drop(a); // SIGKILL, mid-load

    let b = Server::start(&["--data-dir", dir]);
    let all: Vec<String> = done.iter().chain(&running).cloned().collect();
    assert_eq!(listed(&b), all, "every job, in creation order");
    for (id, bytes) in done.iter().zip(&kept) {
        let v = b.get(&format!("/v1/videos/{id}")).1;
        assert_eq!(v["status"], "completed", "{v}");
        assert!(v["expires_at"].as_u64().unwrap() > v["completed_at"].as_u64().unwrap());
        assert_eq!(&b.bytes(&format!("/v1/videos/{id}/content")).1, bytes, "{id}: byte-identical after the restart");
    }
    // A late subscriber still gets the finished job's whole event history.
    assert_eq!(sse(&b, &done[0], |_, _| {}), events_before);
    let unfinished = running.iter().filter(|id| b.get(&format!("/v1/videos/{id}")).1["status"] != "completed").count();
    assert!(unfinished > 0, "the kill came mid-load: some jobs were still to run");
    // The interrupted jobs were queued again (same id, same seed) and finish.
    for id in &running {
        let v = b.wait_done(id);
        assert_eq!(v["status"], "completed", "{v}");
        assert_eq!(v["seed"], json!(10 + running.iter().position(|r| r == id).unwrap()));
    }

    // With --restart-jobs fail, an interrupted job is failed, with the reason, not dropped.
    let late = submit(&b, 400, 99);
    wait_running(&b, &late);
    drop(b);
    let c = Server::start(&["--data-dir", dir, "--restart-jobs", "fail"]);
    let v = c.get(&format!("/v1/videos/{late}")).1;
    assert_eq!((v["status"].as_str(), v["error"]["code"].as_str()), (Some("failed"), Some("server_restarted")), "{v}");
    let events = sse(&c, &late, |_, _| {});
    assert_eq!(events.last().unwrap().0, "error");
    assert_eq!(listed(&c).len(), all.len() + 1);
    assert_eq!(&c.bytes(&format!("/v1/videos/{}/content", done[2])).1, &kept[2]);
    // Deleting removes the file as well as the record.
    let files = || std::fs::read_dir(data.path().join("videos")).unwrap().count();
    let before = files();
    let r = ureq::delete(&c.url(&format!("/v1/videos/{}", done[1]))).call().unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(files(), before - 1);
    drop(c);
    let d = Server::start(&["--data-dir", dir]);
    assert_eq!(d.get(&format!("/v1/videos/{}", done[1])).0, 404);
    assert_eq!(listed(&d).len(), all.len());
}

#[test]
fn a_second_server_on_the_same_data_dir_is_refused() {
    let data = tempfile::tempdir().unwrap();
    let _a = Server::start(&["--data-dir", data.path().to_str().unwrap()]);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fastvideo"))
        .args(["serve", "--port", "0", "--device", "cpu", "--data-dir"])
        .arg(data.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("--data-dir") && err.contains("in use by another fastvideo server"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn expired_videos_are_deleted_and_a_full_budget_answers_507() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(&["--data-dir", data.path().to_str().unwrap(), "--job-ttl", "2", "--disk-budget", "1K"]);
    let id = submit(&server, 2, 1);
    let v = server.wait_done(&id);
    assert_eq!(v["status"], "completed");
    assert_eq!(v["expires_at"].as_u64().unwrap() - v["completed_at"].as_u64().unwrap(), 2);
    // One stored video (a few KiB) fills a 1 KiB budget: new work is refused with a JSON 507.
    let (status, e) = server.post("/v1/videos", video("x", 2, 1));
    assert_eq!((status, e["error"]["code"].as_str()), (507, Some("insufficient_storage")), "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("disk budget"), "{e}");
    // After the TTL the sweeper deletes the record and the file, and the budget frees up.
    let t0 = Instant::now();
    while server.get(&format!("/v1/videos/{id}")).0 != 404
        || std::fs::read_dir(data.path().join("videos")).unwrap().count() > 0
    {
        assert!(t0.elapsed() < Duration::from_secs(15), "the expired video was not deleted");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (status, v) = server.post("/v1/videos", video("x", 2, 1));
    assert_eq!(status, 200, "{v}");
}
