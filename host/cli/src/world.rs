//! `fastvideo world`: an offline world-model rollout under a list of actions, written as an MP4.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;
use fastvideo_assembly::{missing, Capability, LoadedModel, ModelKind, SessionOptions};
use fastvideo_pipeline::session::offline::{parse_actions, rollout};
use fastvideo_pipeline::session::{SessionModel, SessionRequest};
use fastvideo_pipeline::{ClassicCfg, LoopPolicies};

#[derive(Args)]
pub struct WorldArgs {
    /// World-model folder; the shipped `models/world` when omitted.
    #[arg(long)]
    model: Option<PathBuf>,
    /// One action per chunk (4 video frames each), e.g. "right*8,up*8,none*4".
    #[arg(long)]
    actions: String,
    #[arg(long, default_value = "world.mp4")]
    out: PathBuf,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Start from the shipped world's own first frame for this seed (the ball and square placed
    /// by its simulator) instead of generating the first frame.
    #[arg(long)]
    start_seed: Option<u64>,
    /// Text conditioning; the model's own (world.json) when omitted.
    #[arg(long)]
    prompt: Option<String>,
    #[arg(long, default_value = "auto")]
    device: String,
    /// Print a JSON report (chunks, frames, seconds, per-chunk latency) instead of a summary.
    #[arg(long)]
    json: bool,
    /// Warm up first (two chunks, dropped), as `fastvideo serve --world` does on CUDA when it
    /// loads the model: the timings are then a session's in a running server, not a fresh
    /// process's (which pays for kernel compilation and library plans in its first chunk).
    #[arg(long)]
    warm_up: bool,
    #[command(flatten)]
    precision: crate::args::PrecisionArgs,
    /// LoRA adapters for the world model (files; unmerged, every chunk).
    #[command(flatten)]
    lora: crate::lora::LoraArgs,
}

/// The sessions of the world model `loaded`, one at a time, with the simulator's frame as the
/// first frame of a session that asks by `start_seed`: what `fastvideo serve --world` makes,
/// for one local rollout.
pub fn local_sessions(loaded: &dyn LoadedModel) -> Result<std::sync::Arc<dyn SessionModel>> {
    let s = loaded.summary();
    let options = SessionOptions {
        id: "offline".into(),
        max_sessions: 1,
        policies: LoopPolicies::new(std::sync::Arc::new(ClassicCfg)),
        first_frame: Some(std::sync::Arc::new(fastvideo_assembly::world::simulator_frame)),
        adapters: None,
        residency: None,
    };
    let id = s.dir.display().to_string();
    loaded.sessions(options)?.ok_or_else(|| missing(&id, s.family, Capability::Sessions))
}

pub fn run(args: WorldArgs) -> Result<()> {
    let device = fastvideo_torch::device(&args.device)?;
    let dir = match &args.model {
        Some(m) => m.clone(),
        None => fastvideo_assembly::world_model()?,
    };
    let loaded = args.precision.load(&dir, ModelKind::World, device)?;
    let sessions = local_sessions(loaded.as_ref())?;
    let actions = parse_actions(&args.actions)?;
    let known = sessions.actions();
    if let Some(a) = actions.iter().find(|a| !known.contains(a)) {
        anyhow::bail!("--actions: unknown action `{a}`; this model knows {}", known.join(", "));
    }
    let adapters = match loaded.adapter_target() {
        Some(target) => args.lora.set(target)?,
        None if args.lora.lora.is_empty() => None,
        None => return Err(missing(&dir.display().to_string(), loaded.summary().family, Capability::Adapters)),
    };
    let warm_up_seconds = if args.warm_up { Some(tch::no_grad(|| loaded.warm_up())?) } else { None };
    let asked = SessionRequest {
        prompt: args.prompt.clone(),
        start_seed: args.start_seed,
        seed: args.seed,
        ..Default::default()
    };
    let t0 = Instant::now();
    let mut last = t0;
    let mut chunk_seconds = Vec::new();
    // Through the session pipeline, as a server's session runs.
    let video = tch::no_grad(|| {
        rollout(sessions.as_ref(), &asked, &actions, device, adapters, |_| {
            chunk_seconds.push(last.elapsed().as_secs_f64());
            last = Instant::now();
        })
    })?;
    let seconds = t0.elapsed().as_secs_f64();
    fastvideo_media::write_mp4(&video, &args.out).with_context(|| format!("writing {}", args.out.display()))?;
    let n = video.num_frames as f64;
    // What the preset and flags came to on this model: world models have their own gate.
    let r = loaded.summary();
    let lossy = r.lossy_paths();
    if args.json {
        let mut sorted = chunk_seconds[1..].to_vec();
        sorted.sort_by(f64::total_cmp);
        let p = |q: f64| sorted.get(((sorted.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0.0);
        println!(
            "{}",
            serde_json::json!({
                "chunks": chunk_seconds.len(), "frames": video.num_frames, "seconds": seconds,
                "frames_per_second": n / seconds, "first_chunk_seconds": chunk_seconds[0],
                "chunk_seconds_p50": p(0.5), "chunk_seconds_p95": p(0.95), "out": args.out,
                "warm_up_seconds": warm_up_seconds, "precision": r.precision.to_string(), "lossy_paths": lossy,
            })
        );
    } else {
        eprintln!(
            "wrote {} ({} frames, {} chunks) in {:.2} s: {:.1} frames/s (precision {}{})",
            args.out.display(),
            video.num_frames,
            chunk_seconds.len(),
            seconds,
            n / seconds,
            r.precision,
            if lossy.is_empty() { String::new() } else { format!(" with {}", lossy.join(", ")) }
        );
    }
    Ok(())
}
