//! `fastvideo bench-formats`: a Wan transformer shape with its linears stored in each weight
//! format (dense, FP8, GGUF blocks), timed side by side on the same inputs, with the GGUF
//! decode kernel checked against the host decoder (host/scripts/gpu/formats.sh).

use anyhow::{Context, Result};
use clap::Args;
use fastvideo_wan::formats_bench::{self, FormatsBenchOptions, WeightFormat};
use fastvideo_wan::transformer::TransformerConfig;

#[derive(Args)]
pub struct BenchFormatsArgs {
    /// A published shape (wan-1.3b, wan-14b) or a transformer config.json; weights are random.
    #[arg(long, default_value = "wan-14b")]
    shape: String,
    #[arg(long, default_value = "auto")]
    device: String,
    /// Compute dtype: auto (bf16 on CUDA, fp32 on CPU), bf16, fp16 or fp32.
    #[arg(long, default_value = "auto")]
    dtype: fastvideo_torch::DtypeChoice,
    #[command(flatten)]
    size: crate::args::ShapeArgs,
    /// Text tokens of the context.
    #[arg(long, default_value_t = 512)]
    text_len: i64,
    /// Formats to time, comma-separated: dense, fp8, q8_0, q6_k, q5_k, q5_0, q4_k, q4_0, q4_1, q5_1.
    #[arg(long, value_delimiter = ',', default_value = "dense,fp8,q8_0,q4_k")]
    formats: Vec<WeightFormat>,
    /// Timed repetitions (median reported), after one warm-up.
    #[arg(long, default_value_t = 2)]
    runs: usize,
}

pub fn run(args: BenchFormatsArgs) -> Result<()> {
    let crate::args::ShapeArgs { frames, height, width } = args.size;
    anyhow::ensure!((frames - 1) % 4 == 0, "--frames {frames} must be 4k+1");
    anyhow::ensure!(height % 16 == 0 && width % 16 == 0, "--height and --width must be multiples of 16");
    let device = fastvideo_torch::device(&args.device)?;
    let kind = args.dtype.resolve(device);
    fastvideo_torch::init();
    let cfg = if args.shape.ends_with(".json") {
        TransformerConfig::load(std::path::Path::new(&args.shape))?
    } else {
        TransformerConfig::preset(&args.shape).context("--shape")?
    };
    let opts = FormatsBenchOptions {
        latent: [cfg.in_channels, (frames - 1) / 4 + 1, height / 8, width / 8],
        text_len: args.text_len,
        runs: args.runs,
        formats: args.formats,
    };
    let report = formats_bench::run(&cfg, device, kind, &opts)?;
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}
