//! `fastvideo eval`: prompt adherence as a number. Generates one clip per (scene, seed) for a
//! fixed scene list, reads each back with the classical analyzer of `fastvideo-procedural` and prints
//! per-attribute accuracy and time per clip. Held-out scenes are combinations the default model
//! never saw in training.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use fastvideo_assembly::{missing, run_once, Capability, LoadedModel, ModelKind};
use fastvideo_pipeline::{frames_to_video, Values};
use fastvideo_procedural::{analyze, listen, render, Clip, Scene, SoundTally, Soundtrack, Tally, Variation};
use fastvideo_request::OmniRequest;
use fastvideo_request::{ResolvedRequest, VideoArtifact};
use tch::{Kind, Tensor};

use crate::args::{PluginArgs, SamplingArgs};
use crate::eval_i2v;

#[derive(Args)]
pub struct EvalArgs {
    /// Diffusers-layout Wan folder; the default model when omitted.
    #[arg(long)]
    model: Option<PathBuf>,
    /// Which scenes: heldout (never trained on), train, or all.
    #[arg(long, default_value = "heldout")]
    scenes: String,
    /// Use only the first N scenes of the list (a quick smoke run).
    #[arg(long)]
    limit: Option<usize>,
    /// Take every Nth scene of the list (before --limit): the held-out list runs shape by shape,
    /// so `--stride 6` keeps two scenes of each shape.
    #[arg(long, default_value_t = 1)]
    stride: usize,
    /// Seeds per scene (0..N).
    #[arg(long, default_value_t = 1)]
    seeds: u64,
    /// Start the seeds here instead (F..F+N): a second run on fresh seeds adds clips to a
    /// paired comparison without repeating the first run's.
    #[arg(long, default_value_t = 0)]
    first_seed: u64,
    #[command(flatten)]
    sampling: SamplingArgs,
    /// auto, cpu, cuda or cuda:N.
    #[arg(long, default_value = "auto")]
    device: String,
    /// Write every generated clip as MP4 into this folder (named by scene and seed).
    #[arg(long)]
    dump: Option<PathBuf>,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// Print one line per clip.
    #[arg(long)]
    verbose: bool,
    /// Score the VAE alone: render each scene's ground-truth clip, encode and decode it, analyze
    /// the result. The ceiling the transformer can reach with this VAE.
    #[arg(long)]
    vae_roundtrip: bool,
    #[command(flatten)]
    plugins: PluginArgs,
    #[command(flatten)]
    precision: crate::args::PrecisionArgs,
    /// Score the world model instead (`--model` a world folder; the shipped one when omitted):
    /// `--seeds` held-out action sequences of `--world-steps` chunks each.
    #[arg(long)]
    world: bool,
    /// Chunks per world sequence (76: the first frame and 300 more).
    #[arg(long, default_value_t = 76)]
    world_steps: usize,
    /// Score image-to-video instead (`--model` an image-to-video folder; models/default-i2v when
    /// omitted): each scene's first frame is the picture; prints first-frame PSNR, the four
    /// attributes, and whether the motion follows a prompt with the opposite motion.
    #[arg(long, conflicts_with_all = ["world", "vae_roundtrip"])]
    i2v: bool,
    /// Score a LoRA adapter instead (one --lora NAME_OR_FILE[=SCALE]): each clip without it,
    /// with it and at strength 0; prints the object area the shipped adapter grows
    /// (models/default-lora-large), the four attributes for both, and whether strength 0 is
    /// byte-identical to no adapter.
    #[command(flatten)]
    lora: crate::lora::LoraArgs,
    /// Score the prompt extender instead: each scene written as a held-out free-form phrasing,
    /// generated as written and through the model's extender (`--prompt-extender`, else its
    /// `prompt_extender/`); prints the four attributes for both and the exact rewrites.
    #[arg(long, conflicts_with_all = ["world", "vae_roundtrip", "i2v"])]
    extend: bool,
}

/// The scene list for `--scenes`, in a fixed order.
pub fn scenes(which: &str, stride: usize, limit: Option<usize>) -> Result<Vec<Scene>> {
    if stride == 0 {
        bail!("--stride must be positive");
    }
    let all = Scene::all().into_iter();
    let v: Vec<Scene> = match which {
        "heldout" => all.filter(|s| s.held_out()).collect(),
        "train" => all.filter(|s| !s.held_out()).collect(),
        "all" => all.collect(),
        other => bail!("--scenes: `{other}` is not heldout, train or all"),
    };
    let mut v: Vec<Scene> = v.into_iter().step_by(stride).collect();
    if let Some(n) = limit {
        if n == 0 {
            bail!("--limit must be positive");
        }
        v.truncate(n);
    }
    Ok(v)
}

pub fn run(args: EvalArgs) -> Result<()> {
    if args.first_seed != 0 && (args.world || args.i2v || args.extend || !args.lora.lora.is_empty()) {
        bail!("--first-seed applies to the text-to-video eval only (not --world, --i2v, --extend or --lora)");
    }
    if args.world {
        let device = fastvideo_torch::device(&args.device)?;
        let dir = match &args.model {
            Some(m) => m.clone(),
            None => fastvideo_assembly::world_model()?,
        };
        let loaded = args.precision.load(&dir, ModelKind::World, device)?;
        let sessions = crate::world::local_sessions(loaded.as_ref())?;
        return crate::eval_world::run(
            sessions.as_ref(),
            args.seeds,
            args.world_steps,
            device,
            args.dump.as_deref(),
            args.json,
        );
    }
    let list = scenes(&args.scenes, args.stride, args.limit)?;
    if args.seeds == 0 {
        bail!("--seeds must be positive");
    }
    if let Some(d) = &args.dump {
        std::fs::create_dir_all(d).with_context(|| format!("--dump: creating {}", d.display()))?;
    }
    let device = fastvideo_torch::device(&args.device)?;
    let model_dir = match &args.model {
        Some(m) => m.clone(),
        None if args.i2v => fastvideo_assembly::default_i2v_model()?,
        None => fastvideo_assembly::default_model()?,
    };
    let loaded = args.precision.load(&model_dir, ModelKind::Generation, device)?;
    let model = loaded.as_ref();
    let limits = model.limits();
    if args.i2v {
        return run_i2v(&args, &list, model, &model_dir, device);
    }
    if !args.lora.lora.is_empty() {
        return run_lora(&args, &list, model, &model_dir, device);
    }
    if args.extend {
        return run_extend(&args, &list, model, &model_dir, device);
    }
    let build = |scene: &Scene, seed: u64| {
        let mut r = OmniRequest::text_to_video(format!("eval-{seed}"), scene.prompt());
        r.sampling.seed = Some(seed);
        args.sampling.apply(&mut r);
        args.plugins.apply(&mut r);
        r.resolve(&limits, || seed)
    };
    let first = build(&list[0], 0)?;
    let policies = crate::generate::policies_for(&args.plugins, &[&first], &model_dir.display().to_string(), false)?;
    let spec = model.pipeline(policies)?;
    let settings = format!(
        "{} {} steps, guidance {}, shift {}, {}x{}x{}",
        first.sampler.as_str(),
        first.steps,
        first.guidance_scale,
        first.shift,
        first.num_frames,
        first.width,
        first.height
    );
    let total = list.len() as u64 * args.seeds;
    let bar = indicatif::ProgressBar::new(total);
    let mut tally = Tally::default();
    let mut sound = SoundTally::default();
    let mut seconds = Vec::new();
    for scene in &list {
        for seed in args.first_seed..args.first_seed + args.seeds {
            let req = build(scene, seed)?;
            let t0 = Instant::now();
            let video = if args.vae_roundtrip {
                vae_roundtrip(model, scene, seed, &req)?
            } else {
                let out = run_once(spec.clone(), req, device, Values::default(), &mut |_| {})?;
                // A model with sound: does what it sounds like agree with what it was asked to draw?
                if let Some(audio) = out.audio() {
                    let heard = listen(&stereo(audio));
                    sound.add(scene, &heard);
                    if args.verbose {
                        bar.suspend(|| eprintln!("     sound: {heard:?}"));
                    }
                }
                out.video().context("the pipeline produced no video")?.clone()
            };
            seconds.push(t0.elapsed().as_secs_f64());
            let video = &video;
            let clip = Clip {
                frames: video.num_frames as usize,
                height: video.height as usize,
                width: video.width as usize,
                rgb: video.rgb.clone(),
            };
            let got = analyze(&clip);
            let ok = tally.add(scene, &got);
            if args.verbose {
                let line = format!("{} {} seed {seed}: {got:?}", if ok { "ok  " } else { "MISS" }, scene.prompt());
                bar.suspend(|| eprintln!("{line}"));
            }
            if let Some(d) = &args.dump {
                let name = scene.prompt().replace(' ', "_");
                fastvideo_media::write_mp4(video, &d.join(format!("{name}_s{seed}.mp4")))?;
            }
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let acc = tally.accuracy();
    let mean_s = seconds.iter().sum::<f64>() / seconds.len().max(1) as f64;
    eprintln!(
        "model: {}{}",
        model_dir.display(),
        if args.vae_roundtrip { " (VAE round trip of ground truth)" } else { "" }
    );
    eprintln!("{} clips ({} scenes x {} seeds, {}), {settings}", tally.clips, list.len(), args.seeds, args.scenes);
    eprintln!("| colour | shape | motion | background | attribute mean | all four | s/clip |");
    eprintln!("|---|---|---|---|---|---|---|");
    eprintln!(
        "| {:.1}% | {:.1}% | {:.1}% | {:.1}% | {:.1}% | {:.1}% | {mean_s:.2} |",
        acc.color * 100.0,
        acc.shape * 100.0,
        acc.motion * 100.0,
        acc.background * 100.0,
        acc.attribute_mean * 100.0,
        acc.all_correct * 100.0
    );
    let sound_acc = (sound.clips > 0).then(|| sound.accuracy());
    if let Some(s) = &sound_acc {
        eprintln!("sound–picture agreement ({} clips with sound):", sound.clips);
        eprintln!("| pitch = shape | cue follows motion | tonality |");
        eprintln!("|---|---|---|");
        eprintln!("| {:.1}% | {:.1}% | {:.2} |", s.pitch * 100.0, s.cue * 100.0, s.tonality);
    }
    if args.json {
        let summary = serde_json::json!({
            "model": model_dir.display().to_string(),
            "scenes": args.scenes,
            "settings": settings,
            "tally": tally,
            "accuracy": acc,
            "sound_tally": (sound.clips > 0).then_some(&sound),
            "sound_accuracy": sound_acc,
            "seconds_per_clip": mean_s,
        });
        let _ = writeln!(std::io::stdout().lock(), "{}", serde_json::to_string_pretty(&summary)?);
    }
    Ok(())
}

fn run_i2v(
    args: &EvalArgs,
    list: &[Scene],
    model: &dyn LoadedModel,
    model_dir: &std::path::Path,
    device: tch::Device,
) -> Result<()> {
    let limits = model.limits();
    let request = |prompt: &str, seed: u64, png: &[u8]| -> Result<ResolvedRequest> {
        let mut r = eval_i2v::i2v_request(prompt, seed, png);
        args.sampling.apply(&mut r);
        args.plugins.apply(&mut r);
        Ok(r.resolve(&limits, || seed)?)
    };
    let first = request(&list[0].prompt(), 0, &eval_i2v::png(&[128; 3], 1, 1)?)?;
    let policies = crate::generate::policies_for(&args.plugins, &[&first], &model_dir.display().to_string(), false)?;
    let spec = model.pipeline(policies)?;
    eprintln!("model: {} (image to video, {})", model_dir.display(), args.scenes);
    let eval = eval_i2v::I2vEval {
        scenes: list,
        seeds: args.seeds,
        device,
        dump: args.dump.as_deref(),
        verbose: args.verbose,
        json: args.json,
    };
    eval_i2v::run(eval, spec, request)?;
    Ok(())
}

fn run_lora(
    args: &EvalArgs,
    list: &[Scene],
    model: &dyn LoadedModel,
    model_dir: &std::path::Path,
    device: tch::Device,
) -> Result<()> {
    let (choices, files) = args.lora.choices()?;
    let [adapter] = <[_; 1]>::try_from(choices).map_err(|_| anyhow::anyhow!("eval takes one --lora"))?;
    let limits = model.limits();
    let build = |scene: &Scene, seed: u64| -> Result<OmniRequest> {
        let mut r = OmniRequest::text_to_video(format!("eval-{seed}"), scene.prompt());
        r.sampling.seed = Some(seed);
        args.sampling.apply(&mut r);
        args.plugins.apply(&mut r);
        Ok(r)
    };
    let resolve = |r: OmniRequest, seed: u64| -> Result<ResolvedRequest> { Ok(r.resolve(&limits, || seed)?) };
    let first = resolve(build(&list[0], 0)?, 0)?;
    let (policies, mut sources) =
        crate::generate::deploy_for(&args.plugins, &[&first], &model_dir.display().to_string(), false)?;
    sources.extend(files);
    let spec = model.pipeline(policies)?;
    eprintln!("model: {}", model_dir.display());
    let eval = crate::eval_lora::LoraEval {
        scenes: list,
        seeds: args.seeds,
        device,
        adapter,
        sources,
        cache_mib: args.lora.adapter_cache,
        json: args.json,
    };
    crate::eval_lora::run(eval, spec, build, resolve)
}

fn run_extend(
    args: &EvalArgs,
    list: &[Scene],
    model: &dyn LoadedModel,
    model_dir: &std::path::Path,
    device: tch::Device,
) -> Result<()> {
    let Some(extender) = args.precision.model_config().load_extender(model_dir, device)? else {
        bail!(
            "--extend: {} has no prompt extender (a `{}/` folder in the model, or --prompt-extender DIR)",
            model_dir.display(),
            fastvideo_assembly::EXTENDER_FOLDER
        );
    };
    let limits = model.limits();
    let build = |prompt: &str, seed: u64| -> Result<OmniRequest> {
        let mut r = OmniRequest::text_to_video(format!("eval-{seed}"), prompt);
        r.sampling.seed = Some(seed);
        args.sampling.apply(&mut r);
        args.plugins.apply(&mut r);
        Ok(r)
    };
    let resolve = |r: OmniRequest, seed: u64| -> Result<ResolvedRequest> { Ok(r.resolve(&limits, || seed)?) };
    let first = resolve(build(&list[0].prompt(), 0)?, 0)?;
    let policies = crate::generate::policies_for(&args.plugins, &[&first], &model_dir.display().to_string(), false)?;
    let policies = fastvideo_assembly::with_extender(policies, Some(extender.as_ref()));
    let spec = model.pipeline(policies)?;
    eprintln!("model: {} (prompt extension, {} scenes)", model_dir.display(), args.scenes);
    let eval = crate::eval_extend::ExtendEval {
        scenes: list,
        seeds: args.seeds,
        device,
        verbose: args.verbose,
        json: args.json,
    };
    crate::eval_extend::run(eval, spec, build, resolve)
}

/// The scene's ground-truth clip (variation drawn from `seed`) through the model's VAE and back.
fn vae_roundtrip(model: &dyn LoadedModel, scene: &Scene, seed: u64, req: &ResolvedRequest) -> Result<VideoArtifact> {
    let summary = model.summary();
    let Some(autoencoder) = model.autoencoder() else {
        return Err(missing(&summary.dir.display().to_string(), summary.family, Capability::Autoencoder))
            .context("--vae-roundtrip");
    };
    let (f, h, w) = (req.num_frames as usize, req.height as usize, req.width as usize);
    if h != w {
        bail!("--vae-roundtrip renders square clips: --width and --height must agree");
    }
    let clip = render(scene, &Variation::sample(seed), f, h);
    let x = Tensor::from_slice(&clip.rgb)
        .view([1, f as i64, h as i64, w as i64, 3])
        .permute([0, 4, 1, 2, 3])
        .to_kind(Kind::Float)
        .to_device(summary.device)
        / 127.5
        - 1.0;
    frames_to_video(&autoencoder.roundtrip(&x)?, req.fps)
}

/// The model's sound as the listener's stereo track (a mono track is put in both channels).
fn stereo(audio: &fastvideo_request::AudioArtifact) -> Soundtrack {
    let samples = match audio.channels {
        2 => audio.samples.clone(),
        _ => audio.samples.iter().step_by(audio.channels.max(1) as usize).flat_map(|&v| [v, v]).collect(),
    };
    Soundtrack { rate: audio.sample_rate, samples }
}
