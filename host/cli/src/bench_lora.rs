//! `fastvideo bench-lora`: what LoRA adapters cost on a model at one shape (unmerged overhead at
//! batch 1, a batch mixing adapters against one by one, merge and unmerge, file to first
//! forward), printed as one JSON object (host/scripts/gpu/lora_bench.sh runs it at real size).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use fastvideo_wan::lora_bench::{self, LoraBenchOptions};

use crate::args::BenchModelArgs;

#[derive(Args)]
pub struct BenchLoraArgs {
    #[command(flatten)]
    target: BenchModelArgs,
    /// Adapter ranks to time (random adapters on every linear).
    #[arg(long, value_delimiter = ',', default_value = "32,128")]
    ranks: Vec<i64>,
    /// Requests, each with its own adapter, in the mixed batch.
    #[arg(long, default_value_t = 4)]
    batch: usize,
    /// Timed runs per figure (median reported), after one warm-up.
    #[arg(long, default_value_t = 5)]
    runs: usize,
}

pub fn run(args: BenchLoraArgs) -> Result<()> {
    let model = crate::bench::wan_model(&args.target)?;
    let scratch = tempfile_dir()?;
    let shape = &args.target.shape;
    let opts = LoraBenchOptions {
        frames: shape.frames,
        height: shape.height,
        width: shape.width,
        ranks: args.ranks,
        batch: args.batch,
        runs: args.runs,
        scratch: scratch.clone(),
    };
    let report = lora_bench::run(&model, &opts);
    let _ = std::fs::remove_dir_all(&scratch);
    println!("{}", serde_json::to_string(&report?)?);
    Ok(())
}

/// A fresh folder under the system temp dir for the adapter file timed from disk.
fn tempfile_dir() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("fastvideo-bench-lora-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
