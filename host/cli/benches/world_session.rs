//! A live world-model session on the engine, alone and with text-to-video jobs running beside
//! it: frames per second delivered, and the latency from an action to the first frame generated
//! under it (p50/p95). Prints figures; asserts nothing.
//!     cargo bench -p fastvideo --bench world_session
//! Environment: FASTVIDEO_BENCH_SECONDS (per phase, default 10), FASTVIDEO_BENCH_DEVICE.

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fastvideo_engine::session::{SessionEvent, SessionModel, SessionRequest};
use fastvideo_engine::{Engine, EngineConfig, Metrics};
use fastvideo_request::OmniRequest;
use fastvideo_wan::sessions::WorldSessions;
use fastvideo_wan::world::WorldModel;
use fastvideo_wan::{LoadOptions, WanModel};

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// Streams a session for `secs`, sending a new action every 500 ms; returns (frames/s,
/// action-to-first-affected-frame latencies in seconds).
async fn measure(engine: &Engine, id: &str, secs: f64) -> (f64, Vec<f64>) {
    let mut rx = engine.open_session(id.to_string(), SessionRequest { seed: 1, ..Default::default() }).await.unwrap();
    engine.session_streaming(id, true);
    // Let the first chunks out before timing.
    for _ in 0..3 {
        rx.recv().await;
    }
    let actions = ["up", "left", "down", "right"];
    let (t0, mut frames, mut lat) = (Instant::now(), 0u64, Vec::new());
    let mut pending: Option<(u64, Instant)> = None;
    let mut next_action = t0;
    let mut n = 0u64;
    while t0.elapsed().as_secs_f64() < secs {
        if pending.is_none() && Instant::now() >= next_action {
            n += 1;
            engine.session_action(id, &fastvideo_request::ActionPart::key(actions[n as usize % 4], n)).unwrap();
            pending = Some((n, Instant::now()));
            next_action = Instant::now() + Duration::from_millis(500);
        }
        match tokio::time::timeout(Duration::from_millis(50), rx.recv()).await {
            Ok(Some(SessionEvent::Chunk(c))) => {
                frames += c.video.num_frames as u64;
                if let Some((want, sent)) = pending {
                    if c.action_id == want {
                        lat.push(sent.elapsed().as_secs_f64());
                        pending = None;
                    }
                }
            }
            Ok(Some(SessionEvent::Plugin(_))) => {}
            Ok(Some(SessionEvent::Closed { reason })) => panic!("session closed: {reason}"),
            Ok(None) => panic!("session stream ended"),
            Err(_) => {}
        }
    }
    let fps = frames as f64 / t0.elapsed().as_secs_f64();
    engine.close_session(id, "bench done");
    (fps, lat)
}

fn main() -> anyhow::Result<()> {
    let secs: f64 = std::env::var("FASTVIDEO_BENCH_SECONDS").ok().and_then(|v| v.parse().ok()).unwrap_or(10.0);
    let device = fastvideo_torch::device(&std::env::var("FASTVIDEO_BENCH_DEVICE").unwrap_or_else(|_| "auto".into()))?;
    let root = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let model = WanModel::load(&root.join("models/default"), device)?;
    let world = Arc::new(WorldModel::load(&root.join("models/world"), LoadOptions::new(device))?);
    let sessions: Arc<dyn SessionModel> = Arc::new(WorldSessions::plain("world".into(), world, 2, device)?);
    let em = common::text_to_video(&model, device)?;
    let mut registry = prometheus_client::registry::Registry::default();
    let cfg = EngineConfig { max_batch: 1, ..Default::default() };
    let engine = Engine::start_with_sessions(em, Some(sessions), cfg, Metrics::register(&mut registry));
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        // Warm the text-to-video path (cost model, embedding cache).
        engine
            .submit(OmniRequest::text_to_video("warm", "a red circle moving left on a white background"))
            .unwrap()
            .wait()
            .await
            .unwrap();
        println!(
            "world session on {device:?}, {secs} s per phase, an action every 500 ms (16 fps, 4 frames per chunk)"
        );
        println!("| load | frames/s | action latency p50 (ms) | p95 (ms) | actions |");
        println!("|---|---|---|---|---|");
        let (fps, mut lat) = measure(&engine, "alone", secs).await;
        println!(
            "| none | {fps:.1} | {:.0} | {:.0} | {} |",
            pct(&mut lat, 0.5) * 1e3,
            pct(&mut lat, 0.95) * 1e3,
            lat.len()
        );
        // Jobs back to back beside the session.
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (e2, s2) = (engine.clone(), stop.clone());
        let jobs = tokio::spawn(async move {
            let mut done = 0u32;
            while !s2.load(std::sync::atomic::Ordering::Relaxed) {
                let r = OmniRequest::text_to_video(
                    format!("job-{done}"),
                    "a blue square moving right on a black background",
                );
                e2.submit(r).unwrap().wait().await.unwrap();
                done += 1;
            }
            done
        });
        let (fps, mut lat) = measure(&engine, "loaded", secs).await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let done = jobs.await.unwrap();
        println!(
            "| text-to-video jobs back to back ({done} done) | {fps:.1} | {:.0} | {:.0} | {} |",
            pct(&mut lat, 0.5) * 1e3,
            pct(&mut lat, 0.95) * 1e3,
            lat.len()
        );
    });
    Ok(())
}
