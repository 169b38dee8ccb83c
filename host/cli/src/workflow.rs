//! `fastvideo workflow …`: ComfyUI workflows (UI or API format), compiled with the deploy's
//! translator plugins and run on the local model folders its `[workflows.models]` names.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use fastvideo_assembly::LocalEngine;
use fastvideo_comfy::{compile, first_party_schemas, next_output, parse, CompileError, Compiled, Coverage};
use fastvideo_plugin_host::Deployment;

use crate::args::PrecisionArgs;
use crate::progress::Progress;

#[derive(Subcommand)]
pub enum WorkflowCommand {
    /// Read a workflow (UI or API format) and print it in ComfyUI's API format: subgraphs
    /// expanded, bypassed and muted nodes gone, widget values named (by the first-party
    /// translator packs' node schemas).
    Parse { file: PathBuf },
    /// Compile a workflow with the deploy's translators and print the pipeline graph and the
    /// runs it lowers to (JSON).
    Compile {
        file: PathBuf,
        /// Deploy config enabling workflow translators (`examples/plugins-deploy.sh` writes
        /// `deploys/comfyui.toml`).
        #[arg(long)]
        deploy: PathBuf,
    },
    /// Compile a workflow and run it; outputs are written as ComfyUI names them.
    Run(RunArgs),
    /// For every workflow in DIR: does it parse, the first node type nothing handles, and (with
    /// --deploy) whether it compiles and runs here; per node type, how many workflows need it.
    Coverage {
        dir: PathBuf,
        /// Use this deploy's translators; without it, the first-party packs' declared node types.
        #[arg(long)]
        deploy: Option<PathBuf>,
        /// Print the full report as JSON instead of Markdown.
        #[arg(long)]
        json: bool,
        /// How many missing node types the Markdown report lists.
        #[arg(long, default_value_t = 30)]
        top: usize,
    },
}

#[derive(Args)]
pub struct RunArgs {
    file: PathBuf,
    #[arg(long)]
    deploy: PathBuf,
    /// Where outputs go (`filename_prefix` subfolders inside it).
    #[arg(long, default_value = "output")]
    out_dir: PathBuf,
    /// ComfyUI's input folder: where `LoadImage` and `LoadVideo` files are read from.
    #[arg(long, default_value = "input")]
    input_dir: PathBuf,
    /// cpu, cuda, cuda:N, or auto.
    #[arg(long, default_value = "auto")]
    device: String,
    #[command(flatten)]
    precision: PrecisionArgs,
    /// No progress bar or summary on stderr.
    #[arg(long)]
    quiet: bool,
}

fn read_json(file: &Path) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}: not JSON", file.display()))
}

fn load_deploy(path: &Path) -> Result<Arc<Deployment>> {
    Ok(Arc::new(Deployment::load(path).with_context(|| format!("--deploy {}", path.display()))?))
}

fn compiled(file: &Path, deploy: &Deployment) -> Result<Compiled> {
    let translators = deploy.translators().map_err(anyhow::Error::msg)?;
    compile(&read_json(file)?, &translators).with_context(|| file.display().to_string())
}

pub fn run(cmd: WorkflowCommand) -> Result<()> {
    match cmd {
        WorkflowCommand::Parse { file } => {
            let w = parse(&read_json(&file)?, &first_party_schemas()).with_context(|| file.display().to_string())?;
            println!("{}", serde_json::to_string_pretty(&w.to_api())?);
        }
        WorkflowCommand::Compile { file, deploy } => {
            let c = compiled(&file, &*load_deploy(&deploy)?)?;
            let out = serde_json::json!({ "graph": c.graph.to_json(), "runs": c.runs });
            println!("{}", serde_json::to_string_pretty(&out)?);
        }
        WorkflowCommand::Run(args) => run_workflow(args)?,
        WorkflowCommand::Coverage { dir, deploy, json, top } => {
            let read = |e: std::io::Error| anyhow::anyhow!("reading {}: {e}", dir.display());
            let c = match deploy {
                None => {
                    let schemas = first_party_schemas();
                    Coverage::of_dir(&dir, &schemas, &|t| schemas.get(t).is_some()).map_err(read)?
                }
                Some(path) => {
                    let d = load_deploy(&path)?;
                    let t = d.translators().map_err(anyhow::Error::msg)?;
                    let mut c = Coverage::of_dir(&dir, t.schemas(), &|ty| t.handles(ty)).map_err(read)?;
                    c.compile_with(&dir, &t, &d.workflows).map_err(read)?;
                    c
                }
            };
            if json {
                println!("{}", serde_json::to_string_pretty(&c)?);
            } else {
                print!("{}", c.to_markdown(top));
            }
        }
    }
    Ok(())
}

fn run_workflow(args: RunArgs) -> Result<()> {
    let deploy = load_deploy(&args.deploy)?;
    let c = compiled(&args.file, &deploy)?;
    let mut model_config = args.precision.model_config();
    model_config.device = args.device.clone();
    // An engine for the run's model folder, built as `serve` builds its own: the same plugins,
    // and the adapters the run names with the same merging as `/prompt` runs them. Kept while
    // the next run needs the same one, else dropped before the next is built (one model held).
    let mut engine: Option<((PathBuf, Vec<String>), LocalEngine)> = None;
    for (i, plan) in c.runs.iter().enumerate() {
        let folder = deploy.workflows.folder_for(plan).with_context(|| args.file.display().to_string())?;
        let dir = fastvideo_assembly::workflow_model_folder(&args.deploy, &folder)?;
        let req =
            plan.request(&format!("workflow-{}-{i}", std::process::id()), &args.input_dir).map_err(|e| match e {
                CompileError::Input { .. } => anyhow::anyhow!("{e} (--input-dir {})", args.input_dir.display()),
                e => anyhow::anyhow!("{e}"),
            })?;
        let mut lora: Vec<String> = req.lora.iter().map(|l| l.name.clone()).collect();
        lora.sort();
        let key = (dir.clone(), lora);
        if engine.as_ref().is_none_or(|(k, _)| *k != key) {
            // The model held now goes before the next one loads.
            drop(engine.take());
            let name = dir.display().to_string();
            let started = LocalEngine::start(&model_config, &dir, &name, &args.deploy, &deploy, &key.1)
                .with_context(|| format!("model folder {}", dir.display()))?;
            engine = Some((key, started));
        }
        let engine = &engine.as_ref().expect("started above").1;
        // The request's own checks first, so an error names the workflow node that set the field.
        req.clone()
            .resolve(engine.limits(), || plan.seed)
            .map_err(|e| anyhow::anyhow!("node {}: {e} (model {})", plan.node_of(&e.field), dir.display()))?;
        let mut progress = Progress::new(args.quiet);
        let out = engine.run(req, &mut |e| progress.on_event(e));
        progress.finish();
        let out = out.map_err(|e| match e.field() {
            Some(field) => anyhow::anyhow!("node {}: {e}", plan.node_of(field)),
            None => anyhow::anyhow!("{e}"),
        })?;
        let video = out.video().context("the pipeline produced no video")?;
        for o in &plan.outputs {
            let ext = if o.kind == "video" { "mp4" } else { "png" };
            let name =
                next_output(&args.out_dir, &o.prefix, ext).map_err(|e| anyhow::anyhow!("node {}: {e}", o.node))?;
            let path = name.path(&args.out_dir);
            std::fs::create_dir_all(path.parent().expect("has a folder"))
                .with_context(|| format!("creating {}", path.display()))?;
            if o.kind == "video" {
                // With the sound when the workflow's CreateVideo takes it (LTX-2).
                fastvideo_media::write_mp4_with_audio(video, out.audio().filter(|_| o.audio), &path)?;
            } else {
                if video.num_frames != 1 {
                    bail!("node {}: SaveImage of a {}-frame video; use SaveVideo", o.node, video.num_frames);
                }
                std::fs::write(&path, fastvideo_media::png_bytes(video, 0)?)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            println!("{}", path.display());
        }
    }
    Ok(())
}
