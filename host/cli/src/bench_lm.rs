//! `fastvideo bench-lm`: a language model's time to first token and decode tokens/s at several
//! batch sizes (fastvideo_qwen::bench).

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use fastvideo_qwen::bench::{run as bench, LmBenchOptions};

#[derive(Args)]
pub struct BenchLmArgs {
    /// Language-model folder (transformers layout).
    #[arg(long)]
    lm: PathBuf,
    /// Prompt length of the time-to-first-token run.
    #[arg(long, default_value_t = 512)]
    prompt_len: usize,
    /// Batch sizes of the decode runs, comma-separated.
    #[arg(long, default_value = "1,8,32,128")]
    batches: String,
    /// Prompt length of each request in the decode runs.
    #[arg(long, default_value_t = 128)]
    decode_prompt_len: usize,
    /// Decode steps timed per batch size.
    #[arg(long, default_value_t = 32)]
    steps: usize,
    #[arg(long, default_value = "auto")]
    device: String,
    /// auto (bf16 on CUDA, fp32 on a CPU), bf16, fp16, fp32.
    #[arg(long, default_value = "auto")]
    dtype: fastvideo_torch::DtypeChoice,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(args: BenchLmArgs) -> Result<()> {
    let device = fastvideo_torch::device(&args.device)?;
    let batches = args
        .batches
        .split(',')
        .map(|b| b.trim().parse::<usize>().ok().filter(|&b| b > 0))
        .collect::<Option<Vec<_>>>()
        .context("--batches: positive numbers, comma-separated")?;
    let model = fastvideo_qwen::QwenForCausalLM::load(&args.lm, device, args.dtype.resolve(device))?;
    let opts = LmBenchOptions {
        prompt_len: args.prompt_len,
        batches,
        decode_prompt_len: args.decode_prompt_len,
        steps: args.steps,
    };
    let report = bench(&model, &opts)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{} on {} ({}), {} parameters", args.lm.display(), report.device, report.dtype, report.params);
        println!("time to first token, {}-token prompt: {:.4} s", report.prompt_len, report.ttft_s);
        for d in &report.decode {
            println!("decode batch {:>4}: {:.4} s per step, {:.1} tokens/s", d.batch, d.step_s, d.tokens_per_s);
        }
    }
    Ok(())
}
