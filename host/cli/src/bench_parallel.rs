//! `fastvideo bench-parallel`: one CFG step of the transformer for each parallel layout, timed
//! side by side on the same weights and inputs, with each layout's output against one device's
//! (host/scripts/gpu/parallel.sh runs it on the GPU machines).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args;
use fastvideo_wan::parallel_bench::{self, Layout, ParallelBenchOptions};
use fastvideo_wan::transformer::{TransformerConfig, WanTransformer3DModel};
use fastvideo_wan::Weights;
use tch::Device;

#[derive(Args)]
pub struct BenchParallelArgs {
    /// Diffusers-layout Wan folder whose transformer to run.
    #[arg(long, conflicts_with = "shape")]
    model: Option<PathBuf>,
    /// Random weights of a published shape (wan-1.3b, wan-14b) or of a transformer config.json.
    #[arg(long)]
    shape: Option<String>,
    #[arg(long, default_value = "auto")]
    device: String,
    /// Compute dtype: auto (bf16 on CUDA, fp32 on CPU), bf16, fp16 or fp32.
    #[arg(long, default_value = "auto")]
    dtype: fastvideo_torch::DtypeChoice,
    /// Clip size in pixels (Wan's VAE: 4x in time, 8x in space).
    #[command(flatten)]
    size: crate::args::ShapeArgs,
    /// Text tokens of each guidance branch's context.
    #[arg(long, default_value_t = 512)]
    text_len: i64,
    /// Layouts to time, comma-separated: 1, sp:N, cfg:2, cfg+sp:N (default: 1 and every layout
    /// that fits --gpus).
    #[arg(long, value_delimiter = ',')]
    layouts: Vec<Layout>,
    /// GPUs available to the default layouts (default: every CUDA device).
    #[arg(long)]
    gpus: Option<usize>,
    /// Every rank on --device (a layout's arithmetic and overhead on one GPU or the CPU).
    #[arg(long)]
    one_device: bool,
    /// Timed steps per layout (median reported), after one warm-up.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Both guidance branches as one forward of two rows on every layout.
    #[arg(long)]
    batch_branches: bool,
    /// Check NCCL's all-to-all on every GPU against the in-process exchange and time it (alone
    /// when neither --model nor --shape is given).
    #[arg(long)]
    check_collectives: bool,
}

fn default_layouts(gpus: usize) -> Vec<Layout> {
    let mut v = vec!["1".to_string()];
    for n in [2, 4, 8].into_iter().filter(|&n| n <= gpus) {
        v.push(format!("sp:{n}"));
        v.push(if n == 2 { "cfg:2".to_string() } else { format!("cfg+sp:{n}") });
    }
    v.iter().map(|s| s.parse().expect("valid layout")).collect()
}

pub fn run(args: BenchParallelArgs) -> Result<()> {
    let crate::args::ShapeArgs { frames, height, width } = args.size;
    anyhow::ensure!((frames - 1) % 4 == 0, "--frames {frames} must be 4k+1");
    anyhow::ensure!(height % 16 == 0 && width % 16 == 0, "--height and --width must be multiples of 16");
    let device = fastvideo_torch::device(&args.device)?;
    let kind = args.dtype.resolve(device);
    let cuda_devices = fastvideo_torch::init().cuda_devices;
    if args.check_collectives {
        let report = fastvideo_parallel::check::run(cuda_devices).context("--check-collectives")?;
        println!("{}", serde_json::to_string(&serde_json::json!({ "collectives": report }))?);
        if args.model.is_none() && args.shape.is_none() {
            return Ok(());
        }
    }
    let (cfg, weights_of): (TransformerConfig, Box<dyn Fn(Device) -> Result<Weights>>) =
        match (&args.model, &args.shape) {
            (Some(dir), _) => {
                let t = dir.join("transformer");
                let cfg = TransformerConfig::load(&t.join("config.json"))
                    .with_context(|| format!("--model {}", dir.display()))?;
                (cfg, Box::new(move |d| Weights::from_dir(&t, "diffusion_pytorch_model", d, kind)))
            }
            (None, Some(shape)) => {
                let cfg = if shape.ends_with(".json") {
                    TransformerConfig::load(std::path::Path::new(shape))?
                } else {
                    TransformerConfig::preset(shape).context("--shape")?
                };
                (cfg, Box::new(move |d| Ok(Weights::random(7, d, kind))))
            }
            (None, None) => anyhow::bail!("give --model DIR or --shape wan-1.3b|wan-14b|CONFIG.json"),
        };
    let load = |d: Device| -> Result<Arc<WanTransformer3DModel>> {
        Ok(Arc::new(WanTransformer3DModel::new(cfg.clone(), &weights_of(d)?)?))
    };
    let first = load(device)?;
    let layouts = if args.layouts.is_empty() {
        default_layouts(args.gpus.unwrap_or(cuda_devices.max(1)))
    } else {
        args.layouts.clone()
    };
    let opts = ParallelBenchOptions {
        latent: [cfg.in_channels, (frames - 1) / 4 + 1, height / 8, width / 8],
        text_len: args.text_len,
        layouts,
        one_device: args.one_device,
        runs: args.runs,
        guidance: 5.0,
        batch_branches: args.batch_branches,
    };
    let report = parallel_bench::run(first, &load, cuda_devices, &opts)?;
    println!("{}", serde_json::to_string(&report)?);
    for l in &report.layouts {
        eprintln!(
            "{:>9}  {:>2} ranks  {:>8.4} s/step  x{:.2} ({:>3.0} % efficiency)  rel err {:.1e}  [{}]",
            l.layout,
            l.ranks,
            l.step_s,
            l.speedup,
            100.0 * l.efficiency,
            l.rel_err_vs_single,
            l.transport
        );
    }
    Ok(())
}
