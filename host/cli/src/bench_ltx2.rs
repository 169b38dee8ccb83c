//! `fastvideo bench-ltx2`: the LTX-2 audio-video transformer at a published shape with random
//! weights — a forward and a guided denoise step (fastvideo_ltx2::bench).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use fastvideo_ltx2::bench::{run as bench, BenchOptions};

#[derive(Args)]
pub struct BenchLtx2Args {
    /// A transformer `config.json` (a published model's shape; weights are random).
    #[arg(long)]
    config: PathBuf,
    #[arg(long, default_value_t = 121)]
    frames: i64,
    #[arg(long, default_value_t = 512)]
    height: i64,
    #[arg(long, default_value_t = 768)]
    width: i64,
    #[arg(long, default_value_t = 24.0)]
    fps: f64,
    /// Text tokens (the pipeline pads prompts to 1024).
    #[arg(long, default_value_t = 1024)]
    text_len: i64,
    /// The streams' text widths (the connectors' outputs; LTX-2.0: its `caption_channels` for
    /// both; the config's when omitted).
    #[arg(long)]
    text_width: Option<i64>,
    #[arg(long)]
    audio_text_width: Option<i64>,
    /// Timed runs of each measurement.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    #[arg(long, default_value = "auto")]
    device: String,
    /// auto (bf16 on CUDA, fp32 on a CPU), bf16, fp16, fp32.
    #[arg(long, default_value = "auto")]
    dtype: fastvideo_torch::DtypeChoice,
}

pub fn run(args: BenchLtx2Args) -> Result<()> {
    let device = fastvideo_torch::device(&args.device)?;
    let cfg = fastvideo_ltx2::TransformerConfig::load(&args.config)?;
    // Without caption projections (2.3) each stream's text comes at its own width.
    let (video, audio) = match cfg.use_prompt_embeddings {
        true => (cfg.caption_channels, cfg.caption_channels),
        false => (cfg.inner_dim(), cfg.audio_inner_dim()),
    };
    let opts = BenchOptions {
        frames: args.frames,
        height: args.height,
        width: args.width,
        fps: args.fps,
        text_len: args.text_len,
        text_width: args.text_width.unwrap_or(video),
        audio_text_width: args.audio_text_width.unwrap_or(audio),
        runs: args.runs,
    };
    let report = bench(&args.config, device, args.dtype.resolve(device), &opts)?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
