//! Short and long jobs arriving together on the default model: latency of the short jobs under
//! the step scheduler (`shortest_remaining`) against a request-level FIFO baseline, and total
//! throughput; then the same with three served models of which two fit (the long jobs on the
//! two that take turns, the short ones on the primary): what sharing the device with swapping
//! models costs the primary's short jobs. Prints figures; asserts nothing.
//!     cargo bench -p fastvideo --bench mixed_workload
//! Environment: FASTVIDEO_BENCH_JOBS (default 40), FASTVIDEO_BENCH_LONG_EVERY (default 4: every
//! 4th job is long), FASTVIDEO_BENCH_GAP_MS (arrival gap, default 80), FASTVIDEO_BENCH_DEVICE
//! (default auto), FASTVIDEO_DEFAULT_MODEL. A steady stream of short jobs with rare long ones,
//! below capacity (where shortest-remaining starves the long ones):
//!     FASTVIDEO_BENCH_JOBS=100 FASTVIDEO_BENCH_LONG_EVERY=10 FASTVIDEO_BENCH_GAP_MS=420

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use std::sync::Arc;

use fastvideo_engine::{Engine, EngineConfig, EngineModel, Metrics, Policy};
use fastvideo_request::OmniRequest;
use fastvideo_wan::residency::TransformerResidency;
use fastvideo_wan::WanModel;

const LONG_STEPS: u32 = 30;
const SHORT_STEPS: u32 = 4;

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

struct Outcome {
    short: Vec<f64>,
    long: Vec<f64>,
    makespan: f64,
    /// A long job's time alone (the second warm-up run of one, after calibration).
    long_solo: f64,
}

/// The copies of the model served beside the primary in the three-model runs, each sleeping in
/// host memory when the device bound says.
fn copies(models: &[WanModel], device: tch::Device) -> Vec<EngineModel> {
    models
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let mut em = common::text_to_video(m, device).unwrap();
            em.id = format!("copy{}", i + 1);
            em.residency = Some(Arc::new(TransformerResidency::new(m)));
            em
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
async fn run(
    model: &WanModel,
    extra: &[WanModel],
    device: tch::Device,
    cfg: EngineConfig,
    jobs: usize,
    long_every: usize,
    gap: Duration,
) -> Outcome {
    let em = common::text_to_video(model, device).unwrap();
    let mut registry = prometheus_client::registry::Registry::default();
    let engine = Engine::start_with_models(em, copies(extra, device), None, cfg, Metrics::register(&mut registry));
    // The long jobs' model: with copies served, they take turns.
    let long_model = |i: usize| (!extra.is_empty()).then(|| format!("copy{}", 1 + (i / long_every) % extra.len()));
    // Warm up: calibrates the cost model and the text-embedding cache the same way for all.
    let mut long_solo = 0.0;
    let warm: Vec<(u32, Option<String>)> = std::iter::once((LONG_STEPS, None))
        .chain(std::iter::once((SHORT_STEPS, None)))
        .chain((0..extra.len()).map(|c| (LONG_STEPS, Some(format!("copy{}", c + 1)))))
        .chain(std::iter::once((LONG_STEPS, None)))
        .collect();
    for (i, (steps, m)) in warm.into_iter().enumerate() {
        let mut r = OmniRequest::text_to_video(format!("warm-{i}"), "a red circle moving left on a white background");
        r.diffusion.num_inference_steps = Some(steps);
        r.model = m;
        let t = Instant::now();
        engine.submit(r).unwrap().wait().await.unwrap();
        long_solo = t.elapsed().as_secs_f64();
    }
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..jobs {
        let target = t0 + gap * i as u32;
        tokio::time::sleep_until(target.into()).await;
        let long = i % long_every == 0;
        let mut r = OmniRequest::text_to_video(format!("job-{i}"), "a blue square moving right on a black background");
        r.diffusion.num_inference_steps = Some(if long { LONG_STEPS } else { SHORT_STEPS });
        r.sampling.seed = Some(i as u64);
        r.model = if long { long_model(i) } else { None };
        let h = engine.submit(r).unwrap();
        let submitted = Instant::now();
        tasks.push(tokio::spawn(async move {
            h.wait().await.unwrap();
            (long, submitted.elapsed().as_secs_f64())
        }));
    }
    let mut out = Outcome { short: Vec::new(), long: Vec::new(), makespan: 0.0, long_solo };
    for t in tasks {
        let (long, s) = t.await.unwrap();
        if long { &mut out.long } else { &mut out.short }.push(s);
    }
    out.makespan = t0.elapsed().as_secs_f64();
    out
}

fn main() -> anyhow::Result<()> {
    let jobs: usize = std::env::var("FASTVIDEO_BENCH_JOBS").ok().and_then(|v| v.parse().ok()).unwrap_or(40);
    let long_every: usize =
        std::env::var("FASTVIDEO_BENCH_LONG_EVERY").ok().and_then(|v| v.parse().ok()).unwrap_or(4).max(1);
    let gap_ms: u64 = std::env::var("FASTVIDEO_BENCH_GAP_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(80);
    let device = fastvideo_torch::device(&std::env::var("FASTVIDEO_BENCH_DEVICE").unwrap_or_else(|_| "auto".into()))?;
    let dir = std::env::var_os("FASTVIDEO_DEFAULT_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/default")));
    let model = WanModel::load(&dir, device)?;
    let extra = [WanModel::load(&dir, device)?, WanModel::load(&dir, device)?];
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    println!(
        "{jobs} jobs arriving every {gap_ms} ms on {device:?} (every {long_every}th: {LONG_STEPS} steps, others {SHORT_STEPS}; 17x64x64, CFG)"
    );
    println!(
        "| policy | models | max stretch | max batch | short p50 (s) | short p95 (s) | long p50 (s) | long p95 (s) | long solo (s) | long p95 / solo | makespan (s) | jobs/s |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let off = f64::INFINITY;
    for (policy, max_stretch, overdue_share, max_batch, copies) in [
        (Policy::Fifo, off, 0.0, 1, 0),
        (Policy::ShortestRemaining, off, 0.0, 1, 0),
        (Policy::ShortestRemaining, 3.0, 0.5, 1, 0),
        (Policy::ShortestRemaining, 3.0, 0.5, 1, 2),
    ] {
        let max_resident_models = (copies > 0).then_some(2);
        let cfg =
            EngineConfig { policy, max_batch, max_stretch, overdue_share, max_resident_models, ..Default::default() };
        let gap = Duration::from_millis(gap_ms);
        let mut o = rt.block_on(run(&model, &extra[..copies], device, cfg, jobs, long_every, gap));
        let long_p95 = pct(&mut o.long, 0.95);
        let models = if copies == 0 { "1".to_string() } else { format!("{}, 2 resident", copies + 1) };
        println!(
            "| {policy:?} | {models} | {} | {max_batch} | {:.2} | {:.2} | {:.2} | {long_p95:.2} | {:.2} | {:.1}x | {:.2} | {:.2} |",
            if max_stretch.is_finite() { format!("{max_stretch} (share {overdue_share})") } else { "off".into() },
            pct(&mut o.short, 0.5),
            pct(&mut o.short, 0.95),
            pct(&mut o.long, 0.5),
            o.long_solo,
            long_p95 / o.long_solo,
            o.makespan,
            jobs as f64 / o.makespan
        );
    }
    Ok(())
}
