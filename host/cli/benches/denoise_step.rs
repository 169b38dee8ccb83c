//! CPU (or CUDA) time per denoise step of the default model, and of the stages around the loop.
//! Prints figures; asserts nothing. `cargo bench -p fastvideo --bench denoise_step`
//! Environment: FASTVIDEO_BENCH_RUNS (default 5), FASTVIDEO_BENCH_DEVICE (default auto),
//! FASTVIDEO_DEFAULT_MODEL (model folder).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use fastvideo_pipeline::{PipelineRun, Values};
use fastvideo_request::OmniRequest;
use fastvideo_wan::{pipeline, WanModel};

fn stats(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    (mean, v[v.len() / 2], v[0])
}

fn main() -> anyhow::Result<()> {
    let runs: usize = std::env::var("FASTVIDEO_BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let device = fastvideo_torch::device(&std::env::var("FASTVIDEO_BENCH_DEVICE").unwrap_or_else(|_| "auto".into()))?;
    let dir = std::env::var_os("FASTVIDEO_DEFAULT_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/default")));
    let t = Instant::now();
    let model = WanModel::load(&dir, device)?;
    let load = t.elapsed().as_secs_f64();
    let limits = model.limits();
    let spec = Arc::new(pipeline::text_to_video(&model, pipeline::default_guidance())?);
    println!(
        "model {} on {device:?}: loaded in {:.1} ms; torch threads {}",
        dir.display(),
        load * 1e3,
        tch::get_num_threads()
    );
    for (label, guidance) in
        [("CFG on (2 forwards/step)", limits.defaults.guidance_scale), ("CFG off (1 forward/step)", 1.0)]
    {
        let mut step = Vec::new();
        let mut nodes: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
        let mut total = Vec::new();
        for i in 0..runs + 1 {
            let mut r =
                OmniRequest::text_to_video(format!("bench-{i}"), "a red circle moving left on a white background");
            r.sampling.seed = Some(i as u64);
            r.diffusion.guidance_scale = Some(guidance);
            let req = r.resolve(&limits, || 0)?;
            let mut run = PipelineRun::new(Arc::clone(&spec), req, device, Values::default(), Default::default());
            run.run_to_end(&mut |_| {})?;
            let out = run.finish(&mut |_| {})?;
            if i == 0 {
                continue; // warm-up
            }
            step.extend(out.metrics.step_seconds.iter().copied());
            for (n, s) in &out.metrics.node_seconds {
                nodes.entry(n.clone()).or_default().push(*s);
            }
            total.push(out.metrics.total_seconds);
        }
        let d = &limits.defaults;
        println!("\n{label}: {}x{}x{} frames, {} steps, {} runs", d.width, d.height, d.num_frames, d.steps, runs);
        let (mean, p50, min) = stats(step);
        println!("  denoise step   mean {:8.2} ms   p50 {:8.2} ms   min {:8.2} ms", mean * 1e3, p50 * 1e3, min * 1e3);
        for (n, v) in nodes {
            let (mean, p50, min) = stats(v);
            println!("  {n:<14} mean {:8.2} ms   p50 {:8.2} ms   min {:8.2} ms", mean * 1e3, p50 * 1e3, min * 1e3);
        }
        let (mean, p50, min) = stats(total);
        println!("  whole request  mean {:8.2} ms   p50 {:8.2} ms   min {:8.2} ms", mean * 1e3, p50 * 1e3, min * 1e3);
    }
    Ok(())
}
