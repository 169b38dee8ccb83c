//! `fastvideo workflow …`: ComfyUI workflows (UI or API format).

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Subcommand;
use fastvideo_comfy::{core_pack_schemas, parse, Coverage};

#[derive(Subcommand)]
pub enum WorkflowCommand {
    /// Read a workflow (UI or API format) and print it in ComfyUI's API format: subgraphs
    /// expanded, bypassed and muted nodes gone, widget values named.
    Parse { file: PathBuf },
    /// For every workflow in DIR: does it parse, and the first node type the core translator
    /// pack does not declare; per node type, how many workflows need it.
    Coverage {
        dir: PathBuf,
        /// Print the full report as JSON instead of Markdown.
        #[arg(long)]
        json: bool,
        /// How many missing node types the Markdown report lists.
        #[arg(long, default_value_t = 30)]
        top: usize,
    },
}

pub fn run(cmd: WorkflowCommand) -> Result<()> {
    let schemas = core_pack_schemas();
    match cmd {
        WorkflowCommand::Parse { file } => {
            let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
            let v: serde_json::Value =
                serde_json::from_str(&text).with_context(|| format!("{}: not JSON", file.display()))?;
            let w = parse(&v, &schemas).with_context(|| file.display().to_string())?;
            println!("{}", serde_json::to_string_pretty(&w.to_api())?);
        }
        WorkflowCommand::Coverage { dir, json, top } => {
            let c = Coverage::of_dir(&dir, &schemas, &|t| schemas.get(t).is_some())
                .with_context(|| format!("reading {}", dir.display()))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&c)?);
            } else {
                print!("{}", c.to_markdown(top));
            }
        }
    }
    Ok(())
}
