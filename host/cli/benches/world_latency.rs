//! Motion-to-photon latency of a world session in a real browser: Debian's Chromium opens the
//! `/world` page of a `fastvideo serve --world default` (release build), presses a key every
//! 500 ms, and the page measures, on its own clock, key event → first displayed frame generated
//! under that action; also frames per second and the jitter of display intervals. Four phases:
//! WebRTC and the WebSocket fallback, each alone and beside text-to-video jobs back to back.
//!
//! `cargo bench -p fastvideo --bench world_latency` (or `bash host/scripts/world_latency.sh`);
//! FASTVIDEO_BENCH_SECONDS (default 10) per phase. Needs Chromium (`host/scripts/browser.sh`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::sleep;
use std::time::{Duration, Instant};

use serde_json::json;

#[path = "../tests/all/common/mod.rs"]
#[allow(dead_code)] // the bench uses a few of the tests' helpers
mod common;
use common::browser::Browser;
use common::server::{metric, Server};

fn main() {
    let seconds: u64 = std::env::var("FASTVIDEO_BENCH_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(10);
    let server = Server::start(&["--world", "default", "--max-sessions", "2"]);
    let browser = Browser::launch();
    println!(
        "| transport | beside the session | frames/s | jitter ms | motion-to-photon p50 ms | p95 ms | of p50: server (of it queued) / browser ms | action ack round trip p50 ms | frames skipped (stale) | receiver jitter buffer ms | actions |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for transport in ["webrtc", "ws"] {
        for load in [false, true] {
            let stop = Arc::new(AtomicBool::new(false));
            let jobs = load.then(|| {
                let (stop, base) = (stop.clone(), server.base.clone());
                std::thread::spawn(move || {
                    let mut done = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let body = json!({"prompt": "a red circle", "num_inference_steps": 20, "seed": done});
                        let v: serde_json::Value = ureq::post(&format!("{base}/v1/videos"))
                            .send_json(&body)
                            .unwrap()
                            .into_body()
                            .read_json()
                            .unwrap();
                        let id = v["id"].as_str().unwrap().to_string();
                        loop {
                            let v: serde_json::Value = ureq::get(&format!("{base}/v1/videos/{id}"))
                                .call()
                                .unwrap()
                                .into_body()
                                .read_json()
                                .unwrap();
                            if v["status"] == "completed" || v["status"] == "failed" {
                                break;
                            }
                            sleep(Duration::from_millis(20));
                        }
                        done += 1;
                    }
                    done
                })
            });
            let skipped_before = metric(&server.metrics(), "fastvideo_webrtc_frames_skipped_total", None);
            let mut tab = browser.open(&server.url("/world?manual"));
            tab.wait_for("typeof fv === 'object'", Duration::from_secs(20));
            tab.eval(&format!("fv.start({{transport: '{transport}', start_seed: 1}})")).unwrap();
            tab.wait_for("fv.summary().frames.length >= 8", Duration::from_secs(30));
            let keys = ["right", "down", "left", "up"];
            let t0 = Instant::now();
            let mut i = 0;
            while t0.elapsed() < Duration::from_secs(seconds) {
                tab.eval(&format!("fv.press('{}')", keys[i % 4])).unwrap();
                i += 1;
                sleep(Duration::from_millis(500));
            }
            sleep(Duration::from_millis(800));
            // Only the measured window: frames shown after the first key.
            let s = tab
                .eval("(() => { const s = fv.summary(); const t = s.actions[0].t; const f = s.frames.filter(x => x.t >= t);
                  const ts = f.map(x => x.t); const span = (ts[ts.length - 1] - ts[0]) / 1000; s.fps = (f.length - 1) / span;
                  return s; })()")
                .unwrap();
            // The receiver's own account: mean time a frame spent in Chromium's jitter buffer.
            let buffer_ms = tab
                .eval(
                    "(async () => { if (!fv.client.pc) return null; let r = null;
                       (await fv.client.pc.getStats()).forEach(s => { if (s.type === 'inbound-rtp' && s.kind === 'video')
                         r = 1000 * s.jitterBufferDelay / Math.max(1, s.jitterBufferEmittedCount); });
                       return r; })()",
                )
                .unwrap();
            let skipped = metric(&server.metrics(), "fastvideo_webrtc_frames_skipped_total", None) - skipped_before;
            stop.store(true, Ordering::Relaxed);
            let jobs_done = jobs.map(|j| j.join().unwrap());
            let shown = s["actions"].as_array().unwrap().iter().filter(|a| a["latency"].is_number()).count();
            let ms = |v: &serde_json::Value| v.as_f64().map_or("—".to_string(), |x| format!("{x:.0}"));
            println!(
                "| {transport} | {} | {:.1} | {:.1} | {:.0} | {:.0} | {} ({}) / {} | {} | {skipped} | {} | {shown}/{} shown |",
                match jobs_done {
                    Some(n) => format!("text-to-video jobs ({n} done)"),
                    None => "nothing".into(),
                },
                s["fps"].as_f64().unwrap_or(0.0),
                s["jitter_ms"].as_f64().unwrap_or(0.0),
                s["latency_p50_ms"].as_f64().unwrap_or(f64::NAN),
                s["latency_p95_ms"].as_f64().unwrap_or(f64::NAN),
                ms(&s["server_p50_ms"]),
                ms(&s["queued_p50_ms"]),
                ms(&s["browser_p50_ms"]),
                ms(&s["ack_p50_ms"]),
                ms(&buffer_ms),
                s["actions"].as_array().unwrap().len(),
            );
            tab.eval("fv.close()").ok();
            browser.close(tab);
            sleep(Duration::from_secs(1));
        }
    }
}
