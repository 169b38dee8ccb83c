//! `fastvideo bench-cosmos3`: the Cosmos3 transformer at a real shape with random weights — the
//! prompt's pass, a forward, a CFG step with and without the prefix cache, memory, and the
//! reasoner's decode on the same weights (fastvideo_cosmos3::bench).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use fastvideo_cosmos3::bench::{run as bench, BenchOptions};

#[derive(Args)]
pub struct BenchCosmos3Args {
    /// A transformer `config.json` (a published model's shape; weights are random).
    #[arg(long)]
    config: PathBuf,
    #[arg(long, default_value_t = 61)]
    frames: i64,
    #[arg(long, default_value_t = 720)]
    height: i64,
    #[arg(long, default_value_t = 1280)]
    width: i64,
    #[arg(long, default_value_t = 24.0)]
    fps: f64,
    /// Prompt tokens (the negative prompt's: half).
    #[arg(long, default_value_t = 256)]
    prompt_len: i64,
    /// Sound: on (48 kHz, 1920 samples a latent) or off.
    #[arg(long)]
    no_sound: bool,
    /// Timed runs of each measurement.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Reasoner decode steps timed (0: skip).
    #[arg(long, default_value_t = 32)]
    decode_steps: usize,
    #[arg(long, default_value = "auto")]
    device: String,
    /// auto (bf16 on CUDA, fp32 on a CPU), bf16, fp16, fp32.
    #[arg(long, default_value = "auto")]
    dtype: fastvideo_torch::DtypeChoice,
}

pub fn run(args: BenchCosmos3Args) -> Result<()> {
    let device = fastvideo_torch::device(&args.device)?;
    let samples = (args.frames as f64 / args.fps * 48_000.0) as i64;
    let opts = BenchOptions {
        frames: args.frames,
        height: args.height,
        width: args.width,
        fps: args.fps,
        prompt_lens: (args.prompt_len, args.prompt_len / 2),
        sound_frames: if args.no_sound { 0 } else { (samples + 1919) / 1920 },
        runs: args.runs,
        reasoner: (args.prompt_len as usize, args.decode_steps),
    };
    let report = bench(&args.config, device, args.dtype.resolve(device), &opts)?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
