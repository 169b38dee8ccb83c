//! `fastvideo dataset`: renders procedural training clips (the default model's training data)
//! into `clips.u8` (uint8, [N, frames, size, size, 3]) and `clips.json` (shape, prompts, scenes),
//! or the prompt rewriter's phrasings (`--paraphrases`).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{ensure, Context, Result};
use clap::Args;
use fastvideo_procedural::{
    paraphrase_pairs, paraphrase_words, render_styled, soundtrack, Scene, Split, Style, Variation,
};

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
    /// Render the world model's data instead: a ball that random actions move and a square that
    /// drifts on its own, `--steps` latent frames per clip (1 + 4·(steps-1) video frames), with
    /// the action of each latent frame in `actions.u8` ([N, steps], indices into
    /// `clips.json`'s `actions`).
    #[arg(long)]
    world: bool,
    #[arg(long, default_value_t = 9)]
    steps: usize,
    /// How objects are drawn: plain (the default model's data) or large (1.65 times the size:
    /// the shipped LoRA adapter's, models/default-lora-large).
    #[arg(long, default_value = "plain", value_parser = style)]
    style: Style,
    /// Write prompt phrasings instead of clips: `--clips` lines of `{"prompt", "target"}` (a
    /// free-form phrasing and the plain prompt it means) in `paraphrases.jsonl`, and every word
    /// they may use in `words.txt` (the prompt rewriter's training data,
    /// models/training/train_rewriter.py). `heldout` phrasings use templates training never sees.
    #[arg(long, conflicts_with = "world")]
    paraphrases: bool,
    /// Also write each clip's soundtrack — the tone its picture determines (pitch from the
    /// shape, loudness from the size, stereo place from the position; `fastvideo_procedural::
    /// soundtrack`) — into `sounds.f32` (float32, [N, samples, 2], `frames / fps` seconds at
    /// `--sound-rate`): the data of a model with sound.
    #[arg(long, conflicts_with_all = ["world", "paraphrases"])]
    sound: bool,
    /// Samples per second of `--sound`.
    #[arg(long, default_value_t = 16_000, requires = "sound")]
    sound_rate: u32,
    /// Frames per second the clips play at (the soundtrack's length with `--sound`).
    #[arg(long, default_value_t = 24.0, requires = "sound")]
    fps: f32,
}

fn style(s: &str) -> Result<Style, String> {
    Style::parse(s).ok_or_else(|| format!("`{s}` is not plain or large"))
}

pub fn run(args: DatasetArgs) -> Result<()> {
    let held = match args.split.as_str() {
        "train" => false,
        "heldout" => true,
        other => anyhow::bail!("--split: `{other}` is not train or heldout"),
    };
    ensure!(args.clips > 0, "--clips must be positive");
    ensure!(args.size >= 16 && args.frames >= 1, "--size must be at least 16 and --frames at least 1");
    if args.world {
        return world(&args);
    }
    if args.paraphrases {
        return paraphrases(&args, held);
    }
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
                        .flat_map(|(scene, seed)| {
                            render_styled(scene, &Variation::sample(*seed), args.frames, args.size, args.style).rgb
                        })
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
    let mut meta = serde_json::json!({
        "shape": [args.clips, args.frames, args.size, args.size, 3],
        "split": args.split,
        "seed": args.seed,
        "prompts": picks.iter().map(|(s, _)| s.prompt()).collect::<Vec<_>>(),
        "scenes": picks.iter().map(|(s, _)| s).collect::<Vec<_>>(),
    });
    if args.sound {
        ensure!(args.fps > 0.0 && args.sound_rate >= 8_000, "--fps must be positive and --sound-rate at least 8000");
        let seconds = args.frames as f32 / args.fps;
        let path = args.out.join("sounds.f32");
        let mut f = std::io::BufWriter::new(
            std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?,
        );
        let mut samples = 0;
        for (scene, seed) in &picks {
            let track = soundtrack(scene, &Variation::sample(*seed), seconds, args.sound_rate);
            samples = track.len();
            for v in &track.samples {
                f.write_all(&v.to_le_bytes())?;
            }
        }
        f.flush()?;
        meta["sound"] = serde_json::json!({
            "shape": [args.clips, samples, 2],
            "rate": args.sound_rate,
            "fps": args.fps,
            "pitches": fastvideo_procedural::PITCHES,
        });
    }
    std::fs::write(args.out.join("clips.json"), serde_json::to_vec(&meta)?)?;
    eprintln!("wrote {} {} clips to {}", args.clips, args.split, args.out.display());
    Ok(())
}

fn world(args: &DatasetArgs) -> Result<()> {
    use fastvideo_procedural::world::{rollout, sample_actions, Action, WorldState};
    ensure!(args.steps >= 2, "--steps must be at least 2 (the first latent frame has no action)");
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    let seeds: Vec<u64> = (0..args.clips as u64).map(|i| args.seed.wrapping_mul(1_000_003).wrapping_add(i)).collect();
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let chunk = args.clips.div_ceil(threads);
    let parts: Vec<(Vec<u8>, Vec<u8>)> = std::thread::scope(|s| {
        let handles: Vec<_> = seeds
            .chunks(chunk)
            .map(|c| {
                s.spawn(move || {
                    let (mut rgb, mut acts) = (Vec::new(), Vec::new());
                    for &seed in c {
                        let actions = sample_actions(seed, args.steps);
                        rgb.extend(rollout(WorldState::sample(seed), &actions, args.size).0.rgb);
                        acts.extend(actions.iter().map(|a| a.index() as u8));
                    }
                    (rgb, acts)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("render thread")).collect()
    });
    let write = |name: &str, bytes: Vec<&[u8]>| -> Result<()> {
        let path = args.out.join(name);
        let mut w = std::io::BufWriter::new(
            std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?,
        );
        for b in bytes {
            w.write_all(b)?;
        }
        Ok(w.flush()?)
    };
    write("clips.u8", parts.iter().map(|p| p.0.as_slice()).collect())?;
    write("actions.u8", parts.iter().map(|p| p.1.as_slice()).collect())?;
    let frames = 1 + 4 * (args.steps - 1);
    let meta = serde_json::json!({
        "shape": [args.clips, frames, args.size, args.size, 3],
        "steps": args.steps,
        "seed": args.seed,
        "actions": Action::ALL.iter().map(|a| a.word()).collect::<Vec<_>>(),
    });
    std::fs::write(args.out.join("clips.json"), serde_json::to_vec(&meta)?)?;
    eprintln!("wrote {} world clips of {frames} frames to {}", args.clips, args.out.display());
    Ok(())
}

fn paraphrases(args: &DatasetArgs, held: bool) -> Result<()> {
    let split = if held { Split::Eval } else { Split::Train };
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    let mut lines = String::new();
    for (prompt, target) in paraphrase_pairs(args.clips, args.seed, split) {
        lines.push_str(&serde_json::json!({ "prompt": prompt, "target": target }).to_string());
        lines.push('\n');
    }
    let path = args.out.join("paraphrases.jsonl");
    std::fs::write(&path, lines).with_context(|| format!("writing {}", path.display()))?;
    let words = args.out.join("words.txt");
    std::fs::write(&words, paraphrase_words().join("\n") + "\n")
        .with_context(|| format!("writing {}", words.display()))?;
    eprintln!("wrote {} {} phrasings to {}", args.clips, args.split, path.display());
    Ok(())
}
