//! Uploads stored on disk while `/health` is polled over a real socket: storing (writing and
//! fsyncing) a budget's worth of `/v1/files` uploads must leave the async workers free to
//! answer, every acknowledged upload must be whole when the folder is opened again, and the
//! budget must hold with uploads in flight at once.
//!
//! The size is `FASTVIDEO_UPLOAD_TEST_MIB` (default 256; the figure was measured at
//! 1024). The worst `/health` latency is printed, not asserted: it is the machine's number.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{get, rt, send, state};
use axum::http::StatusCode;
use fastvideo_server::{router, Files};

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).build().into()
}

/// Upload `i`'s bytes: its own value everywhere, so a mixed-up or torn file shows.
fn payload(i: usize, size: usize) -> Vec<u8> {
    vec![(i as u8).wrapping_mul(37).wrapping_add(1); size]
}

#[test]
fn health_answers_while_a_budget_of_uploads_is_stored() {
    let mib: u64 = std::env::var("FASTVIDEO_UPLOAD_TEST_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(256);
    let (budget, uploads) = (mib << 20, 16usize);
    let size = (budget / uploads as u64) as usize;
    // On the build's disk, not a tmpfs /tmp (where an fsync costs nothing).
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    // Two workers, as on the 2-core machines where /health stalled.
    let rt = rt();
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = rt.block_on(async { router(state().with_files(Files::open(dir.path(), budget).unwrap())) });
    rt.spawn(async move { axum::serve(listener, app).await });

    let done = Arc::new(AtomicBool::new(false));
    let poller = {
        let (done, url) = (done.clone(), format!("{base}/health"));
        std::thread::spawn(move || {
            let agent = agent();
            let mut latencies = Vec::new();
            loop {
                let t0 = Instant::now();
                let status = agent.get(&url).call().map(|r| r.status().as_u16());
                latencies.push((t0.elapsed(), status.ok()));
                if done.load(Ordering::SeqCst) {
                    return latencies;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let t0 = Instant::now();
    let senders: Vec<_> = (0..uploads)
        .map(|i| {
            let url = format!("{base}/v1/files");
            std::thread::spawn(move || {
                let (content_type, body) = crate::common::form(&[("file", Some("clip.bin"), &payload(i, size))]);
                let mut res = agent().post(&url).header("content-type", content_type).send(&body[..]).unwrap();
                let text = res.body_mut().read_to_string().unwrap();
                assert_eq!(res.status().as_u16(), 200, "upload {i}: {text}");
                let file: serde_json::Value = serde_json::from_str(&text).unwrap();
                (i, file["id"].as_str().unwrap().to_string())
            })
        })
        .collect();
    let ids: Vec<(usize, String)> = senders.into_iter().map(|s| s.join().unwrap()).collect();
    let stored_in = t0.elapsed();
    done.store(true, Ordering::SeqCst);
    let polls = poller.join().unwrap();

    let answered: Vec<Duration> = polls.iter().filter(|(_, s)| *s == Some(200)).map(|(d, _)| *d).collect();
    assert!(!answered.is_empty(), "/health answered while uploads were stored: {polls:?}");
    assert_eq!(answered.len(), polls.len(), "every /health poll answered 200");
    let mut sorted = answered.clone();
    sorted.sort();
    println!(
        "stored {uploads} uploads of {:.1} MiB ({mib} MiB, the budget) concurrently in {:.2} s; /health polled {} \
         times meanwhile: max {:.1} ms, median {:.1} ms",
        size as f64 / (1 << 20) as f64,
        stored_in.as_secs_f64(),
        sorted.len(),
        sorted.last().unwrap().as_secs_f64() * 1e3,
        sorted[sorted.len() / 2].as_secs_f64() * 1e3,
    );

    // The budget is full: one more byte is a 507, whatever was in flight together.
    let (content_type, body) = crate::common::form(&[("file", Some("one.bin"), b"x")]);
    let res = agent().post(&format!("{base}/v1/files")).header("content-type", content_type).send(&body[..]).unwrap();
    assert_eq!(res.status().as_u16(), 507);
    drop(rt);

    // Opened again (a restart): every acknowledged upload, whole.
    reopened_uploads_are_whole(dir.path(), budget, &ids, size);
}

fn reopened_uploads_are_whole(dir: &std::path::Path, budget: u64, ids: &[(usize, String)], size: usize) {
    let files = Files::open(dir, budget).unwrap();
    assert_eq!(files.len(), ids.len());
    rt().block_on(async {
        let app = router(state().with_files(files));
        for (i, id) in ids {
            let res = tower::ServiceExt::oneshot(app.clone(), get(&format!("/v1/files/{id}/content"))).await.unwrap();
            assert_eq!(res.status(), StatusCode::OK, "{id}");
            let bytes = axum::body::to_bytes(res.into_body(), usize::MAX).await.unwrap();
            assert!(bytes.len() == size && bytes[..] == payload(*i, size)[..], "upload {i} ({id}) is whole");
        }
        assert_eq!(send(&app, get("/health")).await.0, StatusCode::OK);
    });
}
