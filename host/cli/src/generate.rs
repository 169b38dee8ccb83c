//! `fastvideo generate`: one text-to-video request, start to MP4.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use fastvideo_pipeline::{LoopPolicies, Values};
use fastvideo_plugin_host::Binding;
use fastvideo_request::{ImageRole, InputPart, OmniRequest, ResizeMode, TaskType, TextRole};

use crate::args::{ParallelArgs, PluginArgs, PrecisionArgs, SamplingArgs};
use fastvideo_assembly::ModelKind;

use crate::progress::Progress;

#[derive(Args)]
pub struct GenerateArgs {
    /// Diffusers-layout Wan folder; when omitted, the default model shipped in models/default
    /// (models/default-i2v when --image is given).
    #[arg(long)]
    model: Option<PathBuf>,
    /// What to generate.
    #[arg(long)]
    prompt: String,
    #[arg(long)]
    negative_prompt: Option<String>,
    /// Image-to-video: the picture (PNG, JPEG or WebP) the video starts from; it is stretched
    /// to --width x --height as diffusers does. Needs an image-to-video model. Image models
    /// (FLUX.2 [klein]): a reference picture to edit or draw from; repeat it for several.
    #[arg(long)]
    image: Vec<PathBuf>,
    /// First-and-last-frame models: the picture the video ends on.
    #[arg(long, requires = "image")]
    last_image: Option<PathBuf>,
    /// A picture placed at an output frame with a strength in [0, 1] (1 when omitted),
    /// `FILE@FRAME[=STRENGTH]`; repeatable (LTX-2: its condition pipeline — frame 0 or 1 + 8k for
    /// the published VAE; the picture is scaled to cover the output and centre-cropped).
    /// Models that cannot place pictures refuse it.
    #[arg(long, value_parser = keyframe, conflicts_with = "image")]
    keyframe: Vec<KeyframeArg>,
    /// Video to video: the input video (MP4, H.264); its frames are stretched to --width x
    /// --height, and --frames defaults to all of them (4k+1). Needs a text-to-video model.
    #[arg(long, conflicts_with = "image")]
    video: Option<PathBuf>,
    /// Video to video: how much of the schedule runs on the noised video, in (0, 1]; 0.8 when
    /// omitted.
    #[arg(long, requires = "video")]
    strength: Option<f64>,
    /// How --image/--last-image/--video of another aspect fit the output: stretch (diffusers'
    /// default), crop (centre, aspect kept) or pad (black bars, aspect kept).
    #[arg(long, value_parser = resize_mode)]
    resize_mode: Option<ResizeMode>,
    /// safetensors with a `latents` tensor: the initial noise, instead of the seed's. For text
    /// and image to video it is diffusers' `latents=` argument; for video to video, the noise
    /// added to the encoded video at --strength (what diffusers draws from its generator).
    /// Models that denoise more than video take their other latents from the same file under
    /// the reference pipeline's argument names (Cosmos3: `sound_latents`, `action_latents`),
    /// used as given, as the pipeline uses them.
    #[arg(long)]
    noise: Option<PathBuf>,
    #[command(flatten)]
    sampling: SamplingArgs,
    /// Seed of the initial noise (random and printed when omitted).
    #[arg(long)]
    seed: Option<u64>,
    /// Frame count; Wan needs 4k+1.
    #[arg(long)]
    frames: Option<u32>,
    #[arg(long)]
    height: Option<u32>,
    #[arg(long)]
    width: Option<u32>,
    #[arg(long)]
    fps: Option<u32>,
    /// auto, cpu, cuda or cuda:N.
    #[arg(long, default_value = "auto")]
    device: String,
    /// Output path: an MP4 (with the sound as an AAC track when the model makes sound), or a
    /// PNG for image models (out.png when omitted) and one-frame requests.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Also write the sound as a WAV (16-bit PCM, the whole waveform the model made); needs a
    /// model that makes sound.
    #[arg(long)]
    audio_out: Option<PathBuf>,
    /// Make no sound, even on a model that makes sound by default (the MP4 then has no audio
    /// track).
    #[arg(long, conflicts_with = "audio_out")]
    no_sound: bool,
    /// Also write each frame as PNG into this folder.
    #[arg(long)]
    frames_dir: Option<PathBuf>,
    /// A pipeline node's parameter, `node.key=value` (value as JSON, else as a string);
    /// repeatable. The nodes that take them and their keys are the model's (LTX-2: `refine`).
    #[arg(long = "node-param", value_parser = crate::args::parse_plugin_param)]
    node_params: Vec<crate::args::PluginParam>,
    /// Models with a latent upsampler (LTX-2): generate at half the size, upsample the latents
    /// ×2 and refine them at the full size (`node_params.refine` with its defaults).
    #[arg(long)]
    two_stage: bool,
    /// Also write the denoising trajectory (kept latents, timesteps, sigmas, the flow_sde steps'
    /// log-probabilities) and final latents as a safetensors file, as `/v1/rollouts` returns a
    /// sample.
    #[arg(long)]
    trajectory_out: Option<PathBuf>,
    /// Reward plugins (enabled by --deploy) to score the video with; printed with the result.
    #[arg(long, value_delimiter = ',')]
    reward: Vec<String>,
    /// Print the request's output record (metrics) as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// Rewrite the prompt with the model's prompt extender first (the shipped default model's
    /// maps free-form words onto its vocabulary); prints the prompt the model was given.
    #[arg(long)]
    extend_prompt: bool,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    /// Run the request this many times first in the same process, untimed: the reported run
    /// is then a warm one (loaded kernels and plans, as a server's second request), for timing.
    #[arg(long, default_value_t = 0, value_name = "N")]
    warmup: u32,
    #[command(flatten)]
    actions: crate::action_args::ActionArgs,
    #[command(flatten)]
    plugins: PluginArgs,
    #[command(flatten)]
    lora: crate::lora::LoraArgs,
    #[command(flatten)]
    precision: PrecisionArgs,
    #[command(flatten)]
    parallel: ParallelArgs,
}

/// The loop policies of a run from its deploy, after checking each request's plugin
/// parameters against it; each bound plugin is named on stderr unless `quiet`.
pub fn policies_for(
    plugins: &PluginArgs,
    requests: &[&fastvideo_request::ResolvedRequest],
    model_id: &str,
    quiet: bool,
) -> Result<LoopPolicies> {
    Ok(deploy_for(plugins, requests, model_id, quiet)?.0)
}

/// [`policies_for`], and the adapters the deploy enables.
pub fn deploy_for(
    plugins: &PluginArgs,
    requests: &[&fastvideo_request::ResolvedRequest],
    model_id: &str,
    quiet: bool,
) -> Result<(LoopPolicies, Vec<fastvideo_pipeline::AdapterSource>)> {
    if plugins.deploy.is_none() && !plugins.plugin_params.is_empty() {
        bail!("--plugin-param needs --deploy (plugins come from a deploy config)")
    }
    let deploy = fastvideo_assembly::deploy_at(plugins.deploy.as_deref())?;
    let binding = Binding::of(deploy.as_ref(), model_id);
    for r in requests {
        binding.check(r)?;
    }
    announce(&binding, quiet);
    let adapters = deploy.map(|d| d.adapters.clone()).unwrap_or_default();
    Ok((binding.policies, adapters))
}

/// Names each bound plugin on stderr unless `quiet`.
pub fn announce(binding: &Binding, quiet: bool) {
    if !quiet {
        for line in binding.describe() {
            eprintln!("{line}");
        }
    }
}

/// Runs one request to its end in this thread, with request-provided `values` (e.g. its
/// adapters) and a progress bar on stderr unless `quiet`.
pub fn run_with_values(
    spec: Arc<fastvideo_pipeline::PipelineSpec>,
    req: fastvideo_request::ResolvedRequest,
    device: tch::Device,
    values: Values,
    quiet: bool,
) -> Result<fastvideo_request::OmniOutput> {
    let mut progress = Progress::new(quiet);
    let out = fastvideo_assembly::run_once(spec, req, device, values, &mut |e| progress.on_event(e));
    progress.finish();
    out
}

/// The tensors of the --noise file as the request's latent inputs: `latents` (required) and
/// whichever of the other latents a model denoises beside it the file has (`sound_latents`,
/// `action_latents`, `audio_latents`), each named as the reference pipeline's call argument.
fn noise_inputs(path: &Path) -> Result<Vec<InputPart>> {
    const OTHERS: [&str; 3] = ["sound_latents", "action_latents", "audio_latents"];
    let tensors = tch::Tensor::read_safetensors(path)
        .map_err(|e| anyhow::anyhow!("--noise: cannot read {} as safetensors: {e}", path.display()))?;
    if !tensors.iter().any(|(n, _)| n == "latents") {
        bail!("--noise: {} has no tensor named `latents`", path.display());
    }
    let mut parts = Vec::new();
    for (name, t) in tensors {
        if name != "latents" && !OTHERS.contains(&name.as_str()) {
            bail!(
                "--noise: {} has a tensor `{name}`; the keys are `latents`, `sound_latents`, `action_latents`, `audio_latents`",
                path.display()
            );
        }
        let t = t.to_kind(tch::Kind::Float).contiguous();
        let name = (name != "latents").then_some(name);
        parts.push(InputPart::Latent { name, shape: t.size(), data: Vec::<f32>::try_from(t.flatten(0, -1))? });
    }
    Ok(parts)
}

/// One `--keyframe FILE@FRAME[=STRENGTH]`.
#[derive(Clone, Debug)]
pub struct KeyframeArg {
    path: PathBuf,
    frame: u32,
    strength: f64,
}

fn keyframe(s: &str) -> Result<KeyframeArg, String> {
    let (path, at) = s.rsplit_once('@').ok_or_else(|| format!("`{s}` is not FILE@FRAME[=STRENGTH]"))?;
    let (frame, strength) = match at.split_once('=') {
        Some((f, st)) => {
            (f, st.parse().map_err(|_| format!("`{st}` in `{s}` is not a strength (a number in [0, 1])"))?)
        }
        None => (at, 1.0),
    };
    let frame = frame.parse().map_err(|_| format!("`{frame}` in `{s}` is not a frame number"))?;
    if path.is_empty() {
        return Err(format!("`{s}` names no file (FILE@FRAME[=STRENGTH])"));
    }
    Ok(KeyframeArg { path: PathBuf::from(path), frame, strength })
}

fn resize_mode(s: &str) -> Result<ResizeMode, String> {
    ResizeMode::parse(s).ok_or_else(|| format!("`{s}` is not stretch, crop or pad"))
}

/// Names the words of `prompt` the text encoder maps to its unknown token (printed even with
/// --quiet: the model sees none of them), suggesting --extend-prompt when the model has a rewriter.
fn warn_unknown_words(model: &dyn fastvideo_assembly::LoadedModel, prompt: &str, can_extend: bool) {
    let Some(unknown) = model.unknown_words() else { return };
    let unknown = unknown(prompt);
    if let Some(w) = fastvideo_assembly::unknown_words_warning(&unknown, can_extend.then_some("--extend-prompt")) {
        eprintln!("warning: {w}");
    }
}

/// The request, and the LoRA files `--lora` names.
fn request(args: &GenerateArgs) -> Result<(OmniRequest, Vec<fastvideo_pipeline::AdapterSource>)> {
    let mut r = OmniRequest::text_to_video(format!("cli-{}", std::process::id()), args.prompt.clone());
    args.plugins.apply(&mut r);
    for (node, key, value) in &args.node_params {
        let entry = r.node_params.entry(node.clone()).or_insert_with(|| serde_json::json!({}));
        if let Some(m) = entry.as_object_mut() {
            m.insert(key.clone(), value.clone());
        }
    }
    if args.two_stage {
        r.node_params.entry("refine".into()).or_insert_with(|| serde_json::json!({}));
    }
    let lora_files = args.lora.apply(&mut r)?;
    args.sampling.apply(&mut r);
    if let Some(n) = &args.negative_prompt {
        r.inputs.push(InputPart::Text { text: n.clone(), role: TextRole::Negative });
    }
    let images = args.image.iter().map(|p| (p, ImageRole::FirstFrame));
    for (p, role) in images.chain(args.last_image.as_ref().map(|p| (p, ImageRole::LastFrame))) {
        r.task = TaskType::I2v;
        r.inputs.push(InputPart::Image { path: Some(p.display().to_string()), b64: None, role });
    }
    for k in &args.keyframe {
        r.task = TaskType::I2v;
        let path = Some(k.path.display().to_string());
        r.inputs.push(InputPart::Keyframe { path, b64: None, frame: k.frame, strength: k.strength });
    }
    if let Some(p) = &args.video {
        r.task = TaskType::V2v;
        r.inputs.push(InputPart::Video { path: Some(p.display().to_string()), b64: None });
    }
    args.actions.apply(&mut r, args.video.is_some())?;
    r.sampling.seed = args.seed;
    let d = &mut r.diffusion;
    d.strength = args.strength;
    d.resize_mode = args.resize_mode;
    d.num_frames = args.frames;
    d.height = args.height;
    d.width = args.width;
    d.fps = args.fps;
    r.outputs.return_trajectory = args.trajectory_out.is_some();
    r.outputs.return_latents = args.trajectory_out.is_some();
    r.outputs.rewards = args.reward.clone();
    r.prompt_extend = args.extend_prompt;
    // A WAV asked for means sound asked for; otherwise the model's default.
    r.outputs.generate_sound = match (&args.audio_out, args.no_sound) {
        (Some(_), _) => Some(true),
        (None, true) => Some(false),
        (None, false) => None,
    };
    if let Some(p) = &args.noise {
        r.inputs.extend(noise_inputs(p)?);
    }
    Ok((r, lora_files))
}

/// Reads and decodes the pictures and the video before the model loads, so a wrong file costs
/// nothing.
fn check_images(args: &GenerateArgs) -> Result<()> {
    let images = args.image.iter().map(|p| (p, "--image"));
    let keyframes = args.keyframe.iter().map(|k| (&k.path, "--keyframe"));
    for (p, flag) in images.chain(args.last_image.as_ref().map(|p| (p, "--last-image"))).chain(keyframes) {
        let bytes = std::fs::read(p).map_err(|e| anyhow::anyhow!("{flag}: cannot read {}: {e}", p.display()))?;
        fastvideo_request::decode_image(&bytes, ImageRole::FirstFrame, flag)
            .map_err(|e| anyhow::anyhow!("{} ({})", e, p.display()))?;
    }
    if let Some(p) = &args.video {
        let bytes = std::fs::read(p).map_err(|e| anyhow::anyhow!("--video: cannot read {}: {e}", p.display()))?;
        fastvideo_request::decode_video(&bytes, "--video").map_err(|e| anyhow::anyhow!("{} ({})", e, p.display()))?;
    }
    Ok(())
}

/// A request built before the model loads, fitted to what the model makes: an image model's
/// task is a picture (`t2i`), or an edit (`i2i`) whose --image pictures are references.
fn fit_to_model(omni: &mut OmniRequest, limits: &fastvideo_request::ModelLimits, args: &GenerateArgs) -> Result<()> {
    if !args.keyframe.is_empty() && !limits.image_roles.contains(&ImageRole::Keyframe) {
        bail!("--keyframe: {} takes no keyframe pictures (a picture at a frame with a strength)", limits.family);
    }
    let edits = limits.tasks.contains(&TaskType::I2i) && !limits.tasks.contains(&TaskType::I2v);
    if edits && omni.task == TaskType::I2v {
        if args.last_image.is_some() {
            bail!("--last-image: {} edits pictures; give every reference with --image", limits.family);
        }
        omni.task = TaskType::I2i;
        for part in &mut omni.inputs {
            if let InputPart::Image { role, .. } = part {
                *role = ImageRole::Reference;
            }
        }
    } else if args.image.len() > 1 {
        bail!(
            "--image: given {} times; a video model takes one first frame (--last-image for the last)",
            args.image.len()
        );
    }
    if limits.video.is_none() && omni.task == TaskType::T2v && limits.tasks.contains(&TaskType::T2i) {
        omni.task = TaskType::T2i;
    }
    Ok(())
}

/// Where the output goes: --out, else out.png for a picture model and out.mp4 otherwise. A
/// picture model refuses a path that is not a PNG.
fn output_path(args: &GenerateArgs, picture_model: bool) -> Result<PathBuf> {
    let is_png = |p: &Path| p.extension().is_some_and(|e| e.eq_ignore_ascii_case("png"));
    match &args.out {
        Some(p) if picture_model && !is_png(p) => {
            bail!("--out {}: this model makes pictures; give a .png path", p.display())
        }
        Some(p) => Ok(p.clone()),
        None if picture_model => Ok(PathBuf::from("out.png")),
        None => Ok(PathBuf::from("out.mp4")),
    }
}

pub fn run(args: GenerateArgs) -> Result<()> {
    if let Some(out) = &args.out {
        crate::output_path::check_output(out, "--out", "out.mp4")?;
    }
    if let Some(p) = &args.audio_out {
        crate::output_path::check_output(p, "--audio-out", "out.wav")?;
    }
    check_images(&args)?;
    args.actions.check(args.video.is_some())?;
    // Built before the model loads, so a bad --noise file costs nothing either.
    let (mut omni, lora_files) = request(&args)?;
    let device = fastvideo_torch::device(&args.device)?;
    let model_dir = match &args.model {
        Some(m) => m.clone(),
        // A first frame without a model means the shipped image-to-video model.
        None if !args.image.is_empty() => fastvideo_assembly::default_i2v_model()?,
        None => fastvideo_assembly::default_model()?,
    };
    let model_config = args.precision.model_config();
    let t0 = Instant::now();
    let mut load_config = model_config.clone();
    args.parallel.apply(&mut load_config);
    let model = load_config
        .load_model(&model_dir, ModelKind::Generation, device, false)
        .with_context(|| format!("--model {}", model_dir.display()))?;
    let load_s = t0.elapsed().as_secs_f64();
    // Loaded only to run; whether the model has one is enough for the hint below. An omni
    // model rewrites with its own reasoner when no extender folder is named.
    let extender = match args.extend_prompt {
        true => match model_config.load_extender(&model_dir, device)? {
            Some(e) => Some(e),
            None => model.rewriter(),
        },
        false => None,
    };
    if args.extend_prompt && extender.is_none() {
        bail!(
            "--extend-prompt: {} has no prompt extender (a `{}/` folder in the model, or --prompt-extender DIR)",
            model_dir.display(),
            fastvideo_assembly::EXTENDER_FOLDER
        );
    }
    let limits = model.limits();
    fit_to_model(&mut omni, &limits, &args)?;
    let picture_model = limits.video.is_none();
    let out_path = output_path(&args, picture_model)?;
    if args.image.is_empty()
        && args.video.is_none()
        && !limits.tasks.contains(&TaskType::T2v)
        && !limits.tasks.contains(&TaskType::T2i)
    {
        if limits.tasks.contains(&TaskType::I2i) {
            bail!("{} is an editing model: give the picture(s) to edit with --image FILE", model_dir.display());
        }
        bail!("{} is an image-to-video model: give the first frame with --image FILE", model_dir.display());
    }
    if args.audio_out.is_some() && limits.audio.is_none() {
        bail!("--audio-out: {} makes no sound", model_dir.display());
    }
    let req = omni.resolve(&limits, fastvideo_request::random_seed)?;
    if !args.extend_prompt {
        warn_unknown_words(model.as_ref(), &req.prompt, model_config.extender_dir(&model_dir).is_some());
    }
    if !args.quiet {
        let r = model.summary();
        eprintln!(
            "model: {} ({device:?}, precision {}{}: {}/{} vae, loaded in {load_s:.2}s)",
            model_dir.display(),
            r.precision,
            match r.lossy_paths() {
                p if p.is_empty() => String::new(),
                p => format!(" with {}", p.join(", ")),
            },
            fastvideo_torch::kind_name(r.dtype),
            r.vae_dtype.map_or("no", fastvideo_torch::kind_name)
        );
        if let Some(p) = &r.parallel {
            eprintln!("parallel: {p}");
        }
        if let Some(d) = &r.note {
            eprintln!("note: {d}");
        }
        if let Some(q) = &r.quantized_weights {
            eprintln!("weights: {q} (lossy against the float checkpoint)");
        }
        if let Some(b) = &r.device_budget {
            eprintln!("memory: {b}");
        }
        eprintln!(
            "generating {} frames {}x{} @ {} fps: {} {} steps, guidance {}, shift {}, seed {}",
            req.num_frames,
            req.width,
            req.height,
            req.fps,
            req.sampler.as_str(),
            req.steps,
            req.guidance_scale,
            req.shift,
            req.seed
        );
        if let Some(base) = &req.schedule {
            let points: Vec<String> =
                base.iter().map(|s| format!("{}", (s * 1000.0 * 100.0).round() / 100.0)).collect();
            eprintln!("schedule: timesteps {} (before the shift)", points.join(", "));
        }
        // The model's own knobs as resolved (Wan 2.2 A14B: its expert boundary and second scale).
        if !req.knobs.is_empty() {
            let knobs: Vec<String> = req.knobs.iter().map(|(k, v)| format!("{k} {v}")).collect();
            eprintln!("model knobs: {}", knobs.join(", "));
        }
    }
    let model_id = model_dir.display().to_string();
    let (policies, mut adapters) = deploy_for(&args.plugins, &[&req], &model_id, args.quiet)?;
    let policies = fastvideo_assembly::with_extender(policies, extender.as_deref());
    let spec = model.pipeline(policies)?;
    spec.check_node_params(&req)?;
    adapters.extend(lora_files);
    for i in 0..args.warmup {
        let values = crate::lora::values(&spec, &req, adapters.clone(), args.lora.adapter_cache)?;
        let t = std::time::Instant::now();
        run_with_values(spec.clone(), req.clone(), device, values, true)?;
        eprintln!("warm-up run {}: {:.2}s", i + 1, t.elapsed().as_secs_f64());
    }
    let values = crate::lora::values(&spec, &req, adapters, args.lora.adapter_cache)?;
    let (prompt, seed) = (req.prompt.clone(), req.seed);
    let out = run_with_values(spec, req, device, values, args.quiet)?;
    if let Some(extended) = &out.extended_prompt {
        // Printed even with --quiet, as the unknown-word warning is: it is what the model drew.
        eprintln!("extended prompt: {extended}");
        warn_unknown_words(model.as_ref(), extended, false);
    }
    if let Some(path) = &args.trajectory_out {
        let sample =
            fastvideo_engine::RolloutSample { prompt_index: 0, group_index: 0, prompt, seed, output: out.clone() };
        let bytes = sample.to_safetensors().context("packing the trajectory")?;
        std::fs::write(path, bytes).with_context(|| format!("--trajectory-out {}", path.display()))?;
    }
    for (name, value) in &out.rewards {
        eprintln!("reward {name}: {value:.4}");
    }
    let video = out.video().context("the pipeline produced no video")?;
    args.actions.write(&out)?;
    // The WAV first: it needs no encoder, so a build that cannot mux sound still keeps it.
    if let Some(path) = &args.audio_out {
        let audio = out.audio().context("the pipeline produced no sound")?;
        fastvideo_media::write_wav(audio, path).context("--audio-out")?;
    }
    let is_png = out_path.extension().is_some_and(|e| e.eq_ignore_ascii_case("png"));
    if is_png {
        if video.num_frames != 1 {
            bail!(
                "--out {}: a PNG holds one picture; this request made {} frames",
                out_path.display(),
                video.num_frames
            );
        }
        let png = fastvideo_media::png_bytes(video, 0)?;
        std::fs::write(&out_path, png).with_context(|| format!("--out {}", out_path.display()))?;
    } else {
        let muxed = out.audio().filter(|_| fastvideo_media::can_mux_audio());
        if let (Some(audio), None) = (out.audio(), muxed) {
            // A build without the AAC encoder keeps the sound beside the MP4, not nowhere.
            let wav = args.audio_out.clone().unwrap_or_else(|| out_path.with_extension("wav"));
            if args.audio_out.is_none() {
                fastvideo_media::write_wav(audio, &wav).with_context(|| format!("writing {}", wav.display()))?;
            }
            eprintln!(
                "warning: this build has no AAC encoder (the `ffmpeg` feature): {} has no sound track; the sound is in {}",
                out_path.display(),
                wav.display()
            );
        }
        fastvideo_media::write_mp4_with_audio(video, muxed, &out_path)?;
    }
    if let Some(dir) = &args.frames_dir {
        fastvideo_media::write_pngs(video, dir)?;
    }
    let steps = &out.metrics.step_seconds;
    if !args.quiet {
        let per_step = steps.iter().sum::<f64>() / steps.len().max(1) as f64;
        eprintln!(
            "wrote {} ({} frames, {}x{}, {} fps{}) in {:.2}s ({:.1} ms per denoise step)",
            out_path.display(),
            video.num_frames,
            video.width,
            video.height,
            video.fps,
            match out.audio() {
                Some(a) => format!(", sound {} Hz x{}", a.sample_rate, a.channels),
                None => String::new(),
            },
            out.metrics.total_seconds,
            per_step * 1e3
        );
        if let Some(m) = fastvideo_kernels::cuda::ordinal(device).and_then(fastvideo_kernels::cuda::allocator_memory) {
            let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
            eprintln!(
                "device memory: peak {:.2} GiB allocated, {:.2} GiB reserved by libtorch's allocator (load included)",
                gib(m.peak_allocated),
                gib(m.peak_reserved)
            );
        }
    }
    if args.json {
        // A closed pipe (`| head`) is not an error worth a panic.
        let _ = writeln!(std::io::stdout().lock(), "{}", serde_json::to_string_pretty(&out)?);
    }
    Ok(())
}
