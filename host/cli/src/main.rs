//! `fastvideo`: the command line. `generate` runs one request through the same pipeline and
//! driver the server uses; errors print as one line and exit non-zero.

mod action_args;
mod args;
mod bench;
mod bench_cosmos3;
mod bench_formats;
mod bench_lm;
mod bench_lora;
mod bench_ltx2;
mod bench_parallel;
mod chat;
mod dataset;
mod eval;
mod eval_extend;
mod eval_i2v;
mod eval_lora;
mod eval_world;
mod generate;
mod lora;
mod output_path;
mod plugin;
mod progress;
mod serve;
mod workflow;
mod world;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "fastvideo", version, about = "Video generation runtime")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate a video from a prompt and write it as an H.264 MP4.
    Generate(Box<generate::GenerateArgs>),
    /// Render procedural training clips (the default model's data set).
    Dataset(dataset::DatasetArgs),
    /// Score prompt adherence: generate clips for fixed scenes and analyze them.
    Eval(Box<eval::EvalArgs>),
    /// Serve the model over an OpenAI-compatible HTTP API (videos, images, SSE, WebSocket).
    Serve(Box<serve::ServeArgs>),
    /// Time a model's components at one shape (forward, CFG step, text encode, VAE decode).
    Bench(bench::BenchArgs),
    /// Time one CFG step of the transformer split over GPUs, for each parallel layout.
    BenchParallel(bench_parallel::BenchParallelArgs),
    /// Time a Wan transformer shape with its linears in each weight format (dense, FP8, GGUF).
    BenchFormats(bench_formats::BenchFormatsArgs),
    /// Time LoRA adapters on a model: unmerged overhead, mixed batches, merge/unmerge, load.
    BenchLora(bench_lora::BenchLoraArgs),
    /// Time a language model: time to first token and decode tokens/s at several batch sizes.
    BenchLm(bench_lm::BenchLmArgs),
    /// Time the Cosmos3 transformer at a real shape with random weights (prefix cache on and off).
    BenchCosmos3(bench_cosmos3::BenchCosmos3Args),
    /// Time the LTX-2 audio-video transformer at a real shape with random weights (a forward and
    /// a guided step).
    BenchLtx2(bench_ltx2::BenchLtx2Args),
    /// Roll out the world model under a list of actions and write the MP4.
    World(world::WorldArgs),
    /// One chat completion from a language-model folder (Qwen3, Qwen2.5), streamed to stdout.
    Chat(chat::ChatArgs),
    /// Inspect and build Wasm plugins.
    #[command(subcommand)]
    Plugin(plugin::PluginCommand),
    /// Read ComfyUI workflows and measure how many we handle.
    #[command(subcommand)]
    Workflow(workflow::WorkflowCommand),
    /// Inspect LoRA adapter files.
    #[command(subcommand)]
    Lora(lora::LoraCommand),
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FASTVIDEO_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            // clap prints help/version to stdout (exit 0) and usage errors to stderr (exit 2).
            let _ = e.print();
            return ExitCode::from(e.exit_code() as u8);
        }
    };
    let result = match cli.command {
        Command::Generate(args) => generate::run(*args),
        Command::Lora(cmd) => lora::run(cmd),
        Command::BenchLora(args) => bench_lora::run(args),
        Command::BenchLm(args) => bench_lm::run(args),
        Command::BenchCosmos3(args) => bench_cosmos3::run(args),
        Command::BenchLtx2(args) => bench_ltx2::run(args),
        Command::Dataset(args) => dataset::run(args),
        Command::World(args) => world::run(args),
        Command::Chat(args) => chat::run(args),
        Command::Eval(args) => eval::run(*args),
        Command::Serve(args) => serve::run(*args),
        Command::Bench(args) => bench::run(args),
        Command::BenchParallel(args) => bench_parallel::run(args),
        Command::BenchFormats(args) => bench_formats::run(args),
        Command::Plugin(cmd) => plugin::run(cmd),
        Command::Workflow(cmd) => workflow::run(cmd),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
