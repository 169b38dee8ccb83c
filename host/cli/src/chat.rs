//! `fastvideo chat`: one chat completion from a language-model folder (Qwen3 or Qwen2.5, the
//! transformers layout), the reply streamed to stdout, usage to stderr.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use fastvideo_pipeline::token::{DecodeParams, FinishReason};
use fastvideo_qwen::{LanguageModel, Message};

#[derive(Args)]
pub struct ChatArgs {
    /// Language-model folder: config.json, model.safetensors, tokenizer.json, the chat template.
    #[arg(long)]
    lm: PathBuf,
    /// The user's message.
    message: String,
    /// A system message before it.
    #[arg(long)]
    system: Option<String>,
    #[arg(long, default_value_t = 256)]
    max_tokens: u32,
    /// 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f64,
    #[arg(long, default_value_t = 1.0)]
    top_p: f64,
    /// 0: off.
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    #[arg(long, default_value_t = 1.0)]
    repetition_penalty: f64,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// End the reply at this text (left out of it); repeatable.
    #[arg(long)]
    stop: Vec<String>,
    #[arg(long, default_value = "auto")]
    device: String,
    /// Compute dtype: bf16 on CUDA, fp32 on a CPU unless given (auto, bf16, fp16, fp32).
    #[arg(long, default_value = "auto")]
    dtype: fastvideo_torch::DtypeChoice,
}

pub fn run(args: ChatArgs) -> Result<()> {
    let device = fastvideo_torch::device(&args.device)?;
    let lm = LanguageModel::load(&args.lm, device, args.dtype.resolve(device))?;
    let mut messages = Vec::new();
    if let Some(s) = &args.system {
        messages.push(Message::new("system", s));
    }
    messages.push(Message::new("user", &args.message));
    let params = DecodeParams {
        max_tokens: args.max_tokens,
        temperature: args.temperature,
        top_p: args.top_p,
        top_k: args.top_k,
        repetition_penalty: args.repetition_penalty,
        seed: args.seed,
        stop_token_ids: Vec::new(),
    };
    let mut out = std::io::stdout().lock();
    let reply = lm.chat(&messages, &params, &args.stop, |piece| {
        let _ = out.write_all(piece.as_bytes());
        let _ = out.flush();
    })?;
    let _ = writeln!(out);
    let finish = match reply.finish_reason {
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
    };
    eprintln!(
        "usage: {} prompt + {} completion tokens, finish {finish}, {:.2} s ({:.1} tokens/s)",
        reply.prompt_tokens,
        reply.completion_tokens,
        reply.seconds,
        reply.completion_tokens as f64 / reply.seconds.max(1e-9)
    );
    Ok(())
}
