//! The Qwen-Image benchmark as a small binary of its own, for GPU-machine calls whose carried
//! files must stay small:
//!
//!     qwenimage_bench CONFIG_DIR TOKENIZER_DIR HEIGHT WIDTH STEPS RUNS [DEVICE]
//!
//! Prints the report as JSON (see `fastvideo_qwenimage::bench`).

use anyhow::{Context, Result};
use fastvideo_qwenimage::bench::{run, BenchOptions};
use tch::Kind;

fn main() -> Result<()> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize| -> Result<i64> { a.get(i).context("too few arguments")?.parse().context("a number") };
    let device = fastvideo_torch::device(a.get(6).map_or("auto", String::as_str))?;
    // bf16 on CUDA (what is served); IMAGE_BENCH_DTYPE=f32 for checking kernels against ops.
    let f32 = std::env::var("IMAGE_BENCH_DTYPE").is_ok_and(|v| v == "f32");
    let kind = if device.is_cuda() && !f32 { Kind::BFloat16 } else { Kind::Float };
    let opts = BenchOptions {
        height: num(2)?,
        width: num(3)?,
        steps: num(4)? as u32,
        runs: num(5)? as usize,
        tokenizer: a.get(1).context("the tokenizer folder")?.into(),
    };
    let report = run(std::path::Path::new(a.first().context("the config folder")?), device, kind, &opts)?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
