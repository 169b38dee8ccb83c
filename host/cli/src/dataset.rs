//! `fastvideo dataset`: renders procedural training clips (the default model's training data)
//! into `clips.u8` (uint8, [N, frames, size, size, 3]) and `clips.json` (shape, prompts, scenes).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{ensure, Context, Result};
use clap::Args;
use fastvideo_synth::{render, Scene, Variation};

#[derive(Args)]
pub struct DatasetArgs {
    /// Output folder (created).
    #[arg(long)]
    out: PathBuf,
    /// Number of clips.
    #[arg(long, default_value_t = 1000)]
    clips: usize,
    /// Seed of scene choice and variations.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// `train` (held-out combinations excluded) or `heldout` (only those).
    #[arg(long, default_value = "train")]
    split: String,
    #[arg(long, default_value_t = 17)]
    frames: usize,
    #[arg(long, default_value_t = 64)]
    size: usize,
}

pub fn run(args: DatasetArgs) -> Result<()> {
    let held = match args.split.as_str() {
        "train" => false,
        "heldout" => true,
        other => anyhow::bail!("--split: `{other}` is not train or heldout"),
    };
    ensure!(args.clips > 0, "--clips must be positive");
    ensure!(args.size >= 16 && args.frames >= 1, "--size must be at least 16 and --frames at least 1");
    let scenes: Vec<Scene> = Scene::all().into_iter().filter(|s| s.held_out() == held).collect();
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    // Scene i cycles through the split so every combination gets an equal share.
    let picks: Vec<(Scene, u64)> = (0..args.clips)
        .map(|i| (scenes[i % scenes.len()], args.seed.wrapping_mul(1_000_003).wrapping_add(i as u64)))
        .collect();
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let chunk = args.clips.div_ceil(threads);
    let parts: Vec<Vec<u8>> = std::thread::scope(|s| {
        let handles: Vec<_> = picks
            .chunks(chunk)
            .map(|c| {
                s.spawn(move || {
                    c.iter()
                        .flat_map(|(scene, seed)| render(scene, &Variation::sample(*seed), args.frames, args.size).rgb)
                        .collect::<Vec<u8>>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("render thread")).collect()
    });
    let path = args.out.join("clips.u8");
    let mut f =
        std::io::BufWriter::new(std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?);
    for p in &parts {
        f.write_all(p)?;
    }
    f.flush()?;
    let meta = serde_json::json!({
        "shape": [args.clips, args.frames, args.size, args.size, 3],
        "split": args.split,
        "seed": args.seed,
        "prompts": picks.iter().map(|(s, _)| s.prompt()).collect::<Vec<_>>(),
        "scenes": picks.iter().map(|(s, _)| s).collect::<Vec<_>>(),
    });
    std::fs::write(args.out.join("clips.json"), serde_json::to_vec(&meta)?)?;
    eprintln!("wrote {} {} clips to {}", args.clips, args.split, args.out.display());
    Ok(())
}
