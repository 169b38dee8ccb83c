//! `fastvideo serve`: the model behind the OpenAI-compatible HTTP API (see docs/api.md). Its
//! flags (or `--config serve.toml`) map onto `fastvideo_assembly::ServeConfig`, which builds
//! the engine and the server.

use anyhow::{Context, Result};
use clap::Args;
use fastvideo_assembly::args::{EngineArgs, ServerArgs};

#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    engine: EngineArgs,
    #[command(flatten)]
    server: ServerArgs,
    /// Build the engine, print what was built (JSON: model, dtypes, plugins, scheduler
    /// parameters after the device's defaults) and exit without listening.
    #[arg(long)]
    print_engine: bool,
}

pub fn run(args: ServeArgs) -> Result<()> {
    let mut cfg = args.engine.config()?;
    args.server.apply(&mut cfg);
    if args.print_engine {
        let built = fastvideo_assembly::build_engine(&cfg)?;
        println!("{}", serde_json::to_string_pretty(&built.description)?);
        return Ok(());
    }
    let served = fastvideo_assembly::build_server(&cfg)?;
    for line in &served.description.plugins {
        eprintln!("{line}");
    }
    eprintln!(
        "fastvideo: admitting requests predicted to hold up to {} MiB together",
        served.description.scheduler.memory_bytes >> 20
    );
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the async runtime")?;
    rt.block_on(fastvideo_server::serve(served.state, served.server))
}
