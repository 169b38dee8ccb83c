//! `fastvideo chat`: one chat completion from a language-model folder (any family the registry
//! serves as a language model: Qwen3 or Qwen2.5 in the transformers layout today), the reply
//! streamed to stdout, usage to stderr. The request is the one `/v1/chat/completions` makes
//! (checked and rendered by the same code) and runs on the model's own chat pipeline, so the
//! command and a served chat answer alike.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;
use fastvideo_assembly::{missing, Capability, ModelKind};
use fastvideo_engine::chat::{ChatModel, ChatParams, ChatRoute};
use fastvideo_pipeline::{CancelToken, ClassicCfg, LoopPolicies, Values};
use fastvideo_request::chat::IncrementalText;
use fastvideo_request::OmniEvent;
use serde_json::json;

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
    let model =
        fastvideo_assembly::args::PrecisionArgs { dtype: Some(args.dtype), ..Default::default() }.model_config();
    let lm = model.load_model(&args.lm, ModelKind::Language, device, false);
    let lm = lm.with_context(|| format!("--lm {}", args.lm.display()))?;
    let id = args.lm.display().to_string();
    let chat = lm.chat().ok_or_else(|| missing(&id, lm.summary().family, Capability::Chat))?;
    let limits = lm.limits();
    let mut messages = Vec::new();
    if let Some(s) = &args.system {
        messages.push(json!({"role": "system", "content": s}));
    }
    messages.push(json!({"role": "user", "content": args.message}));
    let params = ChatParams {
        messages: Some(messages.into()),
        max_tokens: Some(args.max_tokens),
        temperature: Some(args.temperature),
        top_p: Some(args.top_p),
        top_k: Some(args.top_k),
        repetition_penalty: Some(args.repetition_penalty),
        seed: Some(args.seed),
        stop: Some(json!(args.stop)),
        ..Default::default()
    };
    let served = ChatModel { id: &id, codec: chat.codec.as_ref(), context: limits.max_steps as usize };
    let mut prep = params.prepare(ChatRoute::Chat, &served, "chat".into())?;
    let req = prep.request.clone().resolve(&limits, || args.seed)?;
    (chat.check)(&req)?;
    let spec = lm.pipeline(LoopPolicies::new(Arc::new(ClassicCfg)))?;
    let (cancel, t0) = (CancelToken::default(), Instant::now());
    let mut text = IncrementalText::default();
    let mut out = std::io::stdout().lock();
    let mut show = |piece: &str| {
        let _ = out.write_all(piece.as_bytes());
        let _ = out.flush();
    };
    let stop = &mut prep.stop;
    let ran = fastvideo_assembly::run_until(spec, req, device, Values::default(), cancel.clone(), &mut |e| {
        if let OmniEvent::Token { token, .. } = e {
            let new = stop.update(text.push(chat.codec.as_ref(), *token));
            show(&new);
            // A stop string ends the generation here, as a served chat's does.
            if stop.stopped() {
                cancel.cancel();
            }
        }
    });
    if !stop.stopped() {
        ran?;
        // What was held back, once no stop string can follow.
        show(&stop.finish(&text.finish(chat.codec.as_ref())));
    }
    let _ = writeln!(out);
    let completion = text.tokens().len();
    let finish = if !stop.stopped() && completion >= prep.max_tokens as usize { "length" } else { "stop" };
    let seconds = t0.elapsed().as_secs_f64();
    eprintln!(
        "usage: {} prompt + {completion} completion tokens, finish {finish}, {seconds:.2} s ({:.1} tokens/s)",
        prep.prompt_tokens,
        completion as f64 / seconds.max(1e-9)
    );
    Ok(())
}
