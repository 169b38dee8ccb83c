//! `fastvideo bench-lora`: what LoRA adapters cost on a model at one shape (unmerged overhead at
//! batch 1, a batch mixing adapters against one by one, merge and unmerge, file to first
//! forward), printed as one JSON object (host/scripts/gpu/lora_bench.sh runs it at real size).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use fastvideo_wan::lora_bench::{self, LoraBenchOptions};

use crate::args::{PrecisionArgs, ShapeArgs};

#[derive(Args)]
pub struct BenchLoraArgs {
    /// Diffusers-layout Wan folder; the default model when omitted.
    #[arg(long)]
    model: Option<PathBuf>,
    #[arg(long, default_value = "auto")]
    device: String,
    #[command(flatten)]
    precision: PrecisionArgs,
    #[command(flatten)]
    shape: ShapeArgs,
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
    let device = fastvideo_torch::device(&args.device)?;
    let dir = match &args.model {
        Some(m) => m.clone(),
        None => fastvideo_assembly::default_model()?,
    };
    let model = args.precision.load(&dir, device)?;
    let scratch = tempfile_dir()?;
    let opts = LoraBenchOptions {
        frames: args.shape.frames,
        height: args.shape.height,
        width: args.shape.width,
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
