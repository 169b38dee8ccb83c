//! `fastvideo bench-cosmos3` as a small binary of its own, for GPU-machine calls whose carried
//! files must stay small (the CLI links the server, WebRTC and wasm as well):
//!
//!     cosmos3_bench CONFIG FRAMES HEIGHT WIDTH RUNS DECODE_STEPS [DEVICE] [NO_SOUND]
//!
//! Prints the report as JSON.

use anyhow::{Context, Result};
use fastvideo_cosmos3::bench::{run, BenchOptions};
use tch::Kind;

fn main() -> Result<()> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize| -> Result<i64> { a.get(i).context("too few arguments")?.parse().context("a number") };
    let device = match a.get(6).map(String::as_str) {
        Some(name) => fastvideo_torch::device(name)?,
        None => fastvideo_torch::device("auto")?,
    };
    // bf16 on CUDA (what is served); COSMOS3_BENCH_DTYPE=f32 for checking kernels against ops.
    let f32 = std::env::var("COSMOS3_BENCH_DTYPE").is_ok_and(|v| v == "f32");
    let kind = if device.is_cuda() && !f32 { Kind::BFloat16 } else { Kind::Float };
    let (frames, fps) = (num(1)?, 24.0);
    let samples = (frames as f64 / fps * 48_000.0) as i64;
    let opts = BenchOptions {
        frames,
        height: num(2)?,
        width: num(3)?,
        fps,
        prompt_lens: (256, 128),
        sound_frames: if a.get(7).is_some() { 0 } else { (samples + 1919) / 1920 },
        runs: num(4)? as usize,
        reasoner: (256, num(5)? as usize),
    };
    let report = run(std::path::Path::new(a.first().context("the config")?), device, kind, &opts)?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
