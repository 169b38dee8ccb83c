//! Component timings of a loaded Wan model at one shape: the figures `fastvideo bench` prints
//! and `host/scripts/gpu/bench.sh` sets beside diffusers' in one run.

use std::collections::HashMap;
use std::time::Instant;

use anyhow::{ensure, Context, Result};
use serde::Serialize;
use tch::{Device, Kind, Tensor};

use fastvideo_layers::measure::{median, peak_of, phase, psnr, sync, time, PhaseMemory};

use crate::loader::WanModel;

/// What to measure.
pub struct BenchOptions {
    /// Video frames the inputs stand for (`4k+1`).
    pub frames: i64,
    /// Video height in pixels.
    pub height: i64,
    /// Video width in pixels.
    pub width: i64,
    /// Timed repetitions of each transformer measurement (median reported).
    pub runs: usize,
    /// Timed repetitions of the VAE decode.
    pub vae_runs: usize,
    /// Inputs to use instead of seeded noise, under diffusers' `WanTransformer3DModel.forward`
    /// argument names (`hidden_states`, `timestep`, `encoder_hidden_states`,
    /// `encoder_hidden_states_image`) or this crate's older ones (`latents`, `context`), and
    /// optionally `vae_latents`.
    pub inputs: HashMap<String, Tensor>,
    /// Also decode in float32 and report the PSNR of the model's VAE dtype against it.
    pub vae_compare: bool,
    /// LoRA adapters every forward runs with (unmerged), if any.
    pub adapters: Option<std::sync::Arc<fastvideo_pipeline::AdapterSet>>,
}

/// Seconds are medians over the timed runs, after one warm-up.
#[derive(Debug, Serialize)]
pub struct BenchReport {
    /// The device it ran on.
    pub device: String,
    /// The precision preset the model was loaded with (exact, bf16, fast).
    pub precision: String,
    /// The lossy options on top of the preset (`fp8_linears`, `int8_attention`).
    pub lossy_paths: Vec<&'static str>,
    /// The transformer's dtype.
    pub transformer_dtype: &'static str,
    /// The VAE's dtype.
    pub vae_dtype: &'static str,
    /// Whether the fused CUDA kernels ran.
    pub kernels: bool,
    /// Video tokens of one forward.
    pub tokens: i64,
    /// Loading the model.
    pub load_s: f64,
    /// The process's peak resident host memory after loading, if the OS reports it.
    pub host_peak_rss_bytes: Option<u64>,
    /// One transformer forward.
    pub forward_s: f64,
    /// Every timed forward, in order.
    pub forward_runs_s: Vec<f64>,
    /// Host time to queue one forward's work (started on an idle device, not waiting for it to
    /// finish): far below `forward_s` means kernel launches are hidden behind GPU work.
    pub forward_enqueue_s: f64,
    /// One guided denoise step: both branches and their combination.
    pub cfg_step_s: f64,
    /// Both CFG branches as one forward of batch 2 (what the engine's step batching does with
    /// rows of several requests).
    pub forward_batch2_s: f64,
    /// Encoding one prompt with the text encoder.
    pub text_encode_s: f64,
    /// Decoding the latents with the VAE.
    pub vae_decode_s: f64,
    /// The tiny decoder timed on the same latents: `folder` (the model's `tiny_vae/`, with its
    /// PSNR against the full decoder's frames) or `random full-size` (a TAEHV-size decoder on
    /// random weights, speed only); none when the VAE's shape has no tiny counterpart.
    pub tiny_decoder: Option<&'static str>,
    /// Decoding the same latents with the tiny decoder, in chunks.
    pub tiny_decode_s: Option<f64>,
    /// Latent frames per pass of the tiny decoder (`tiny_decode_s`).
    pub tiny_decode_chunk_frames: Option<i64>,
    /// The tiny decoder on the whole clip in one pass, for comparison.
    pub tiny_decode_one_pass_s: Option<f64>,
    /// One live preview of the same latents (`preview_every`): pooled last frame, VAE decode,
    /// JPEG; compare with `cfg_step_s`.
    pub preview_s: f64,
    /// PSNR of the tiny decoder's frames against the VAE's (`folder` decoders only).
    pub tiny_psnr_vs_vae_db: Option<f64>,
    /// Image-to-video models: the CLIP image encoder on the request's picture(s).
    pub image_encode_s: Option<f64>,
    /// What `--max-device-memory` streams, when something does.
    pub device_budget: Option<String>,
    /// Image-to-video models: the VAE encode of the conditioning video (the picture(s) and
    /// black frames).
    pub vae_encode_s: Option<f64>,
    /// Device memory in use after loading (driver's view: includes libtorch's cache, so the
    /// growth past it is what the work itself reserved).
    pub gpu_used_after_load_bytes: Option<u64>,
    /// Device memory in use after the transformer runs, as `gpu_used_after_load_bytes`.
    pub gpu_used_after_transformer_bytes: Option<u64>,
    /// Device memory in use after the VAE decode, as `gpu_used_after_load_bytes`.
    pub gpu_used_after_vae_bytes: Option<u64>,
    /// Where `phase_memory`'s peaks come from: `allocator` (libtorch's caching allocator, as
    /// `torch.cuda.max_memory_allocated`/`max_memory_reserved` read it; needs the CUDA-graph
    /// shim beside the binary) or `driver` (used memory after each phase only: no peaks).
    pub memory_view: &'static str,
    /// Each phase's memory on its own (cache emptied, peaks reset at its start): `forward`,
    /// `cfg_step`, `forward_batch2`, `text_encode`, `vae_decode`, `tiny_decode` (in chunks),
    /// `tiny_decode_one_pass` (the whole clip at once, what it was before), `preview`.
    pub phase_memory: Vec<PhaseMemory>,
    /// The allocated peak of the work diffusers' memory script does (text encode, CFG step, VAE
    /// decode), with no tiny decoder or previews: the figure to set beside diffusers'.
    pub same_work_peak_allocated_bytes: Option<u64>,
    /// The reserved peak of the same work.
    pub same_work_peak_reserved_bytes: Option<u64>,
    /// The scaled-dot-product backend libtorch picks for the self-attention shape.
    pub sdpa_backend: &'static str,
    /// `vae_compare`: PSNR of the VAE's frames in its dtype against float32's.
    pub vae_psnr_vs_fp32_db: Option<f64>,
    /// `vae_compare`: the float32 decode's time.
    pub vae_fp32_decode_s: Option<f64>,
    /// Two-expert models: the low-noise expert's forward.
    pub expert_2_forward_s: Option<f64>,
    /// Two-expert models: a forward of each expert right after the other's (alternating, per
    /// forward): above `forward_s` by what switching costs.
    pub expert_switch_forward_s: Option<f64>,
    /// `--offload-experts`: alternating experts as above with blocking swaps (the whole
    /// incoming expert copied before its forward starts), to set against the streamed default.
    pub expert_switch_blocking_forward_s: Option<f64>,
    /// Whether the low-noise expert's forward right after a swap equals, bit for bit, its forward
    /// with nothing in flight (streamed weights must arrive before they are read).
    pub expert_switch_exact: Option<bool>,
    /// `--offload-experts`: the host's mean time in one swap over the swaps above (streamed,
    /// queueing the copies; blocking, the whole copy).
    pub expert_swap_s: Option<f64>,
    /// The velocity for the inputs (float32), for parity checks.
    #[serde(skip)]
    pub velocity: Option<Tensor>,
}

/// The input under the first of `names` the file has (diffusers' name first), else seeded noise.
fn input(opts: &BenchOptions, names: &[&str], shape: &[i64], seed: i64, device: Device) -> Result<Tensor> {
    match names.iter().find_map(|n| opts.inputs.get(*n).map(|t| (n, t))) {
        Some((name, t)) => {
            ensure!(t.size() == shape, "--inputs: `{name}` has shape {:?}, this run needs {shape:?}", t.size());
            Ok(t.to_kind(Kind::Float).to_device(device))
        }
        None => {
            tch::manual_seed(seed);
            Ok(Tensor::randn(shape, (Kind::Float, Device::Cpu)).to_device(device))
        }
    }
}

fn sdpa_name(choice: i64) -> &'static str {
    match choice {
        0 => "math",
        1 => "flash",
        2 => "efficient",
        3 => "cudnn",
        4 => "overrideable",
        _ => "unknown",
    }
}

/// Runs every measurement.
pub fn run(model: &WanModel, opts: &BenchOptions) -> Result<BenchReport> {
    let dev = model.device;
    let device_memory = || match dev {
        Device::Cuda(i) => fastvideo_kernels::cuda::memory_used(i),
        _ => None,
    };
    let t = &model.transformer;
    let (tf, sf) = (model.vae.cfg.temporal_factor(), model.vae.cfg.spatial_factor());
    ensure!((opts.frames - 1) % tf == 0, "--frames {} must be {tf}k+1", opts.frames);
    // The transformer's input: the noise latents, with an image-to-video model's mask and
    // encoded-picture channels.
    let lat = [1, t.cfg.in_channels, (opts.frames - 1) / tf + 1, opts.height / sf, opts.width / sf];
    let len = model.max_sequence_length() as i64;
    let latents = input(opts, &["hidden_states", "latents"], &lat, 1, dev)?;
    let timestep = match opts.inputs.get("timestep") {
        Some(ts) => ts.to_kind(Kind::Float).to_device(dev),
        None => Tensor::from_slice(&[500f32]).to_device(dev),
    };
    let context = input(opts, &["encoder_hidden_states", "context"], &[1, len, t.cfg.text_dim], 2, dev)?;
    let uncond = context.zeros_like();
    // CLIP states: one picture (I2V) or two (FLF2V) of the encoder's token count.
    let image = match (t.cfg.image_dim, &model.image) {
        (Some(d), image) => {
            let rows = if t.cfg.pos_embed_seq_len.is_some() { 2 } else { 1 };
            let tokens = image.as_ref().and_then(|i| i.clip.as_ref()).map_or(257, |c| c.encoder.cfg.tokens());
            Some(input(opts, &["encoder_hidden_states_image"], &[rows, tokens, d], 4, dev)?)
        }
        (None, _) => None,
    };
    let image = image.as_ref();
    let forward = |x: &Tensor, ts: &Tensor, c: &Tensor, img: Option<&Tensor>| {
        let rows = fastvideo_pipeline::AdapterRows::all(opts.adapters.as_deref(), x.size()[0]);
        t.forward_adapted(x, ts, c, img, rows.as_ref(), None)
    };
    let [pt, ph, pw] = t.cfg.patch_size;
    let tokens = lat[2] / pt * (lat[3] / ph) * (lat[4] / pw);

    let gpu_used_after_load_bytes = device_memory();
    let mut mem = Vec::new();
    let (mut fw, velocity) =
        phase(dev, "forward", &mut mem, || time(dev, opts.runs, || forward(&latents, &timestep, &context, image)))?;
    let forward_runs_s = fw.clone();
    let forward_s = median(&mut fw);
    let mut enqueue = Vec::with_capacity(opts.runs);
    for _ in 0..opts.runs.max(1) {
        sync(dev);
        let t0 = Instant::now();
        let out = forward(&latents, &timestep, &context, image)?;
        enqueue.push(t0.elapsed().as_secs_f64());
        sync(dev);
        drop(out);
    }
    let (mut cfg, _) = phase(dev, "cfg_step", &mut mem, || {
        time(dev, opts.runs, || {
            let c = forward(&latents, &timestep, &context, image)?;
            let u = forward(&latents, &timestep, &uncond, image)?;
            Ok(&u + (c - &u) * 5.0)
        })
    })?;
    let (mut b2, _) = {
        let (x2, t2, c2) = (
            Tensor::cat(&[&latents, &latents], 0),
            Tensor::cat(&[&timestep, &timestep], 0),
            Tensor::cat(&[&context, &uncond], 0),
        );
        let i2 = image.map(|i| Tensor::cat(&[i, i], 0));
        phase(dev, "forward_batch2", &mut mem, || time(dev, opts.runs, || forward(&x2, &t2, &c2, i2.as_ref())))?
    };
    let sdpa_backend = {
        let heads = t.cfg.num_attention_heads;
        let q = Tensor::zeros([1, heads, tokens, t.cfg.attention_head_dim], (model.load_report.transformer_dtype, dev));
        sdpa_name(Tensor::internal_fused_sdp_choice(&q, &q, &q, None::<Tensor>, 0.0, false, None, false))
    };
    // Offloaded experts: each forward brings its expert to the device first.
    let on = |e: u32| model.offload.as_ref().map_or(Ok(()), |s| s.ensure(e));
    let (expert_2_forward_s, expert_switch_forward_s, expert_switch_blocking_forward_s, expert_switch_exact) =
        match &model.low_noise {
            Some(e) => {
                let t2 = &e.transformer;
                let (mut f2, resident_out) = time(dev, opts.runs, || {
                    on(1)?;
                    t2.forward_adapted(&latents, &timestep, &context, image, None, None)
                })?;
                let (mut sw, switched_out) = time(dev, opts.runs, || {
                    on(0)?;
                    drop(t.forward_adapted(&latents, &timestep, &context, image, None, None)?);
                    on(1)?;
                    t2.forward_adapted(&latents, &timestep, &context, image, None, None)
                })?;
                on(0)?;
                // The same with blocking swaps: what streaming the incoming expert saves.
                let blocking = match &model.offload {
                    Some(swap) => {
                        swap.set_overlap(false);
                        let r = time(dev, opts.runs, || {
                            on(0)?;
                            drop(t.forward_adapted(&latents, &timestep, &context, image, None, None)?);
                            on(1)?;
                            t2.forward_adapted(&latents, &timestep, &context, image, None, None)
                        });
                        swap.set_overlap(true);
                        on(0)?;
                        Some(median(&mut r?.0) / 2.0)
                    }
                    None => None,
                };
                // Bitwise: the low-noise forward right after a (streamed) swap vs with it resident.
                let same = resident_out.equal(&switched_out);
                (Some(median(&mut f2)), Some(median(&mut sw) / 2.0), blocking, Some(same))
            }
            None => (None, None, None, None),
        };
    let expert_swap_s = model.offload.as_ref().map(|s| s.swaps()).filter(|(n, _)| *n > 0).map(|(n, s)| s / n as f64);
    let gpu_used_after_transformer_bytes = device_memory();

    let (ids, mask) = model.tokenizer.encode(&["a red circle moving left".to_string()], len as usize, dev)?;
    let (mut te, _) =
        phase(dev, "text_encode", &mut mem, || time(dev, opts.runs, || model.text_encoder.forward(&ids, &mask)))?;

    let (image_encode_s, vae_encode_s) = match &model.image {
        Some(cond) => {
            let rows = if t.cfg.pos_embed_seq_len.is_some() { 2 } else { 1 };
            let ie = match &cond.clip {
                Some(clip) => {
                    let side = clip.encoder.cfg.image_size;
                    let px = Tensor::randn([rows, 3, side, side], (Kind::Float, dev));
                    let (mut ie, _) = time(dev, opts.runs, || clip.encoder.penultimate(&px))?;
                    Some(median(&mut ie))
                }
                None => None,
            };
            let first = Tensor::rand([1, 3, opts.height, opts.width], (Kind::Float, dev)) * 2.0 - 1.0;
            let last = (rows == 2).then(|| first.flip([3]));
            let (mut ve, _) = time(dev, opts.vae_runs, || {
                crate::image_condition::image_condition(&model.vae, &first, last.as_ref(), opts.frames)
            })?;
            (ie, Some(median(&mut ve)))
        }
        None => (None, None),
    };
    let z = [1, model.vae.cfg.z_dim, lat[2], lat[3], lat[4]];
    let vae_latents = input(opts, &["vae_latents"], &z, 3, dev)?;
    let (mut vd, frames) =
        phase(dev, "vae_decode", &mut mem, || time(dev, opts.vae_runs, || model.vae.decode(&vae_latents)))?;
    let gpu_used_after_vae_bytes = device_memory();
    let (vae_psnr_vs_fp32_db, vae_fp32_decode_s) = if opts.vae_compare && model.load_report.vae_dtype != Kind::Float {
        let w = crate::Weights::from_dir(&model.dir.join("vae"), "diffusion_pytorch_model", dev, Kind::Float)?;
        let vae32 = crate::AutoencoderKLWan::new(model.vae.cfg.clone(), &w).context("fp32 VAE for comparison")?;
        let (mut v32, reference) = time(dev, 1, || vae32.decode(&vae_latents))?;
        (Some(psnr(&frames, &reference)), Some(median(&mut v32)))
    } else {
        (None, None)
    };

    let tiny = tiny_decode(model, &vae_latents, &frames, opts, &mut mem)?;
    let preview = crate::preview::WanPreview::new(model.vae.clone());
    let (mut pv, _) = phase(dev, "preview", &mut mem, || {
        time(dev, opts.vae_runs.max(3), || {
            fastvideo_pipeline::LatentPreview::preview(&preview, &vae_latents).map(|p| Tensor::from(p.2.len() as i64))
        })
    })?;
    let same_work = ["text_encode", "forward", "cfg_step", "vae_decode"];

    Ok(BenchReport {
        device: format!("{dev:?}"),
        precision: model.load_report.precision.to_string(),
        lossy_paths: fastvideo_torch::lossy_paths(model.load_report.fp8_linears, model.load_report.int8_attention),
        transformer_dtype: fastvideo_torch::kind_name(model.load_report.transformer_dtype),
        vae_dtype: fastvideo_torch::kind_name(model.load_report.vae_dtype),
        kernels: fastvideo_kernels::enabled(),
        tokens,
        load_s: model.load_report.seconds,
        host_peak_rss_bytes: model.load_report.host_peak_rss_bytes,
        forward_s,
        forward_runs_s,
        forward_enqueue_s: median(&mut enqueue),
        cfg_step_s: median(&mut cfg),
        forward_batch2_s: median(&mut b2),
        text_encode_s: median(&mut te),
        vae_decode_s: median(&mut vd),
        tiny_decoder: tiny.which,
        tiny_decode_s: tiny.seconds,
        tiny_decode_chunk_frames: tiny.which.map(|_| crate::tiny_vae::DECODE_CHUNK_FRAMES),
        tiny_decode_one_pass_s: tiny.one_pass_seconds,
        preview_s: median(&mut pv),
        tiny_psnr_vs_vae_db: tiny.psnr_db,
        image_encode_s,
        device_budget: model.load_report.device_budget.clone(),
        vae_encode_s,
        gpu_used_after_load_bytes,
        gpu_used_after_transformer_bytes,
        gpu_used_after_vae_bytes,
        memory_view: if mem.iter().any(|p| p.peak_allocated_bytes.is_some()) { "allocator" } else { "driver" },
        same_work_peak_allocated_bytes: peak_of(&mem, &same_work, |p| p.peak_allocated_bytes),
        same_work_peak_reserved_bytes: peak_of(&mem, &same_work, |p| p.peak_reserved_bytes),
        phase_memory: mem,
        sdpa_backend,
        vae_psnr_vs_fp32_db,
        vae_fp32_decode_s,
        expert_2_forward_s,
        expert_switch_forward_s,
        expert_switch_blocking_forward_s,
        expert_switch_exact,
        expert_swap_s,
        velocity: Some(velocity.to_kind(Kind::Float).to_device(Device::Cpu).contiguous()),
    })
}

/// What [`tiny_decode`] measured.
struct Tiny {
    which: Option<&'static str>,
    seconds: Option<f64>,
    one_pass_seconds: Option<f64>,
    psnr_db: Option<f64>,
}

/// The tiny decoder on the bench's latents (see [`BenchReport::tiny_decode_s`]): in chunks as
/// `decode` runs it, then once over the whole clip (its memory beside the chunks').
fn tiny_decode(
    model: &WanModel,
    latents: &Tensor,
    frames: &Tensor,
    opts: &BenchOptions,
    mem: &mut Vec<PhaseMemory>,
) -> Result<Tiny> {
    use crate::tiny_vae::{TinyDecoderConfig, TinyVideoDecoder};
    let (dev, cfg) = (model.device, &model.vae.cfg);
    let (which, decoder) = match &model.tiny_vae {
        Some(t) => ("folder", t.clone()),
        None if cfg.spatial_factor() % 8 == 0 && cfg.temporal_factor() == 4 => {
            let mut c = TinyDecoderConfig::full_size(cfg.z_dim);
            c.patch_size = cfg.spatial_factor() / 8;
            let w = crate::Weights::random(0, dev, model.load_report.vae_dtype);
            ("random full-size", std::sync::Arc::new(TinyVideoDecoder::new(c, &w)?))
        }
        None => return Ok(Tiny { which: None, seconds: None, one_pass_seconds: None, psnr_db: None }),
    };
    let (mut t, video) = phase(dev, "tiny_decode", mem, || time(dev, opts.vae_runs, || decoder.decode(latents)))?;
    let psnr_db = (which == "folder" && video.size() == frames.size()).then(|| psnr(&video, frames));
    drop(video);
    let whole = latents.size()[2];
    let (mut one, _) =
        phase(dev, "tiny_decode_one_pass", mem, || time(dev, 1, || decoder.decode_chunked(latents, whole)))?;
    Ok(Tiny { which: Some(which), seconds: Some(median(&mut t)), one_pass_seconds: Some(median(&mut one)), psnr_db })
}
