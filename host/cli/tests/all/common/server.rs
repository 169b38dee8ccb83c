//! A `fastvideo serve` process for tests, and reading its metrics.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A server process on a free port, stopped (SIGKILL) on drop.
pub struct Server {
    pub child: Child,
    pub base: String,
    /// Its job store (a temp dir unless the test passed `--data-dir`).
    _data: Option<tempfile::TempDir>,
}

impl Server {
    pub fn start(extra: &[&str]) -> Self {
        let data = (!extra.iter().any(|a| *a == "--data-dir" || *a == "--ephemeral"))
            .then(|| tempfile::tempdir().expect("a temp dir"));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_fastvideo"));
        cmd.args(["serve", "--port", "0", "--device", "cpu"]);
        if let Some(d) = &data {
            cmd.arg("--data-dir").arg(d.path());
        }
        let mut child =
            cmd.args(extra).stderr(Stdio::piped()).stdout(Stdio::null()).spawn().expect("starting fastvideo serve");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let base = loop {
            let line = lines.next().expect("server exited before listening").unwrap();
            if let Some(url) = line.split(" on ").nth(1).filter(|_| line.contains("serving")) {
                break url.trim().to_string();
            }
        };
        // Keep draining stderr so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Self { child, base, _data: data }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let r = ureq::post(&self.url(path)).config().http_status_as_error(false).build().send_json(&body).unwrap();
        let status = r.status().as_u16();
        (status, r.into_body().read_json().unwrap())
    }

    pub fn get(&self, path: &str) -> (u16, Value) {
        let r = ureq::get(&self.url(path)).config().http_status_as_error(false).build().call().unwrap();
        let status = r.status().as_u16();
        (status, r.into_body().read_json().unwrap_or(Value::Null))
    }

    /// A GET's body bytes and status.
    pub fn bytes(&self, path: &str) -> (u16, Vec<u8>) {
        let r = ureq::get(&self.url(path)).config().http_status_as_error(false).build().call().unwrap();
        let status = r.status().as_u16();
        (status, r.into_body().read_to_vec().unwrap())
    }

    pub fn wait_done(&self, id: &str) -> Value {
        let t0 = Instant::now();
        loop {
            let (_, v) = self.get(&format!("/v1/videos/{id}"));
            if v["status"] == "completed" || v["status"] == "failed" {
                return v;
            }
            assert!(t0.elapsed() < Duration::from_secs(300), "job {id} never finished: {v}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn metrics(&self) -> prometheus_parse::Scrape {
        let text = ureq::get(&self.url("/metrics")).call().unwrap().into_body().read_to_string().unwrap();
        prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
            .expect("metrics parse as Prometheus text")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn metric(scrape: &prometheus_parse::Scrape, name: &str, label: Option<(&str, &str)>) -> f64 {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == name)
        .filter(|s| label.is_none_or(|(k, v)| s.labels.get(k) == Some(v)))
        .map(|s| match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => 0.0,
        })
        .sum()
}

/// Reads a job's SSE stream to its end: (event name, data) pairs.
pub fn sse(server: &Server, id: &str, mut on_event: impl FnMut(&str, &Value)) -> Vec<(String, Value)> {
    let body = ureq::get(&server.url(&format!("/v1/videos/{id}/events"))).call().unwrap().into_body();
    let mut events = Vec::new();
    let mut name = String::new();
    for line in BufReader::new(body.into_reader()).lines() {
        let line = line.unwrap();
        if let Some(n) = line.strip_prefix("event: ") {
            name = n.to_string();
        } else if let Some(d) = line.strip_prefix("data: ") {
            let v: Value = serde_json::from_str(d).unwrap();
            on_event(&name, &v);
            let last = name == "done" || name == "error";
            events.push((name.clone(), v));
            if last {
                break;
            }
        }
    }
    events
}
