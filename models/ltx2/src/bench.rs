//! Timings of the audio-video transformer at a published size with random weights: one
//! forward (both streams, one sample), and one denoise step as the loop runs it with the
//! pipeline's guidance — the conditional, unconditional, STG and modality passes as one batch of
//! four — with peak memory. What `fastvideo bench-ltx2` prints and
//! `host/scripts/gpu/ltx2_bench.sh` sets beside diffusers eager and torch.compile.

use std::path::Path;

use anyhow::Result;
use fastvideo_layers::measure::{median, phase, time, PhaseMemory};
use fastvideo_torch::weights::Weights;
use serde::Serialize;
use tch::{Device, Kind, Tensor};

use crate::config::TransformerConfig;
use crate::transformer::{Ltx2Inputs, Ltx2Transformer};

/// What to measure.
pub struct BenchOptions {
    /// Output frames (`8k + 1`).
    pub frames: i64,
    /// Pixels.
    pub height: i64,
    /// Pixels.
    pub width: i64,
    /// Frame rate (positions and the audio's length).
    pub fps: f64,
    /// Text tokens (the pipeline pads prompts to 1024).
    pub text_len: i64,
    /// The transformer's text width (the connectors' output: `caption_channels` for 2.0).
    pub text_width: i64,
    /// The audio stream's text width (the same for 2.0).
    pub audio_text_width: i64,
    /// Timed runs of each measurement (after one warm-up).
    pub runs: usize,
}

/// The figures, in seconds and bytes.
#[derive(Debug, Serialize)]
pub struct BenchReport {
    /// Device.
    pub device: String,
    /// Compute dtype.
    pub dtype: String,
    /// Video tokens `[frames, rows, columns]` of the latent grid and their count.
    pub video_tokens: i64,
    /// Audio tokens.
    pub audio_tokens: i64,
    /// One forward of one sample, both streams (median).
    pub forward_s: f64,
    /// One step with the pipeline's guidance as the loop runs it: the conditional, unconditional,
    /// STG and modality passes in one batch of four (median).
    pub step_s: f64,
    /// Bytes of the linear layers' weights (nearly all of them).
    pub weight_bytes: u64,
    /// Peak allocated bytes over the step.
    pub peak_allocated_bytes: Option<u64>,
    /// Per-phase memory.
    pub memory: Vec<PhaseMemory>,
}

/// Builds the transformer of `config` with random weights on `device` in `kind` and measures.
pub fn run(config: &Path, device: Device, kind: Kind, o: &BenchOptions) -> Result<BenchReport> {
    let cfg = TransformerConfig::load(config)?;
    let w = Weights::random(7, device, kind);
    let model = Ltx2Transformer::new(cfg.clone(), &w)?;
    let _guard = tch::no_grad_guard();
    let [ft, fs, _] = cfg.vae_scale_factors;
    let grid = [(o.frames - 1) / ft + 1, o.height / fs, o.width / fs];
    let n = grid.iter().product::<i64>();
    let rate = cfg.audio_sampling_rate as f64 / cfg.audio_hop_length as f64 / cfg.audio_scale_factor as f64;
    let na = (o.frames as f64 / o.fps * rate).round() as i64;
    let opts = (kind, device);
    // Inputs for one sample and for two, made once: the timings are the model's alone.
    let inputs = |b: i64| {
        (
            Tensor::randn([b, n, cfg.in_channels], opts),
            Tensor::randn([b, na, cfg.audio_in_channels], opts),
            Tensor::randn([b, o.text_len, o.text_width], opts),
            Tensor::randn([b, o.text_len, o.audio_text_width], opts),
            Tensor::ones([b, o.text_len], (Kind::Int64, device)),
            Tensor::full([b], 937.0, (Kind::Float, device)),
        )
    };
    let (one, four) = (inputs(1), inputs(4));
    // The loop's one forward a step: [cond, uncond, perturbed, isolated].
    let perturb4 = Tensor::from_slice(&[1.0f32, 1.0, 0.0, 1.0]).to_device(device);
    let exchange4 = Tensor::from_slice(&[1.0f32, 1.0, 1.0, 0.0]).to_device(device);
    let forward = |b: i64, stg: &[usize], isolate: bool| -> Result<()> {
        let (video, audio, text, audio_text, mask, t) = if b == 1 { &one } else { &four };
        let (perturb, exchange) = match b {
            1 => (None, None),
            _ => (Some(perturb4.shallow_clone()), Some(exchange4.shallow_clone())),
        };
        let _velocities = model.forward(&Ltx2Inputs {
            video,
            audio,
            text,
            audio_text,
            text_mask: Some(mask),
            audio_text_mask: Some(mask),
            timestep: t,
            audio_timestep: None,
            sigma: Some(t),
            audio_sigma: None,
            grid,
            fps: o.fps,
            audio_frames: na,
            isolate_modalities: isolate,
            exchange_mask: exchange.as_ref(),
            stg_blocks: stg,
            perturbation_mask: perturb.as_ref(),
            use_cross_timestep: true,
            lora: None,
        })?;
        Ok(())
    };
    let stg: Vec<usize> = crate::denoise::STG_BLOCKS.iter().copied().filter(|&b| b < cfg.num_layers).collect();
    let mut memory = Vec::new();
    let runs = o.runs.max(1);
    let (mut fwd_t, _) = phase(device, "forward", &mut memory, || time(device, runs, || forward(1, &[], false)))?;
    let (mut step_t, _) = phase(device, "step", &mut memory, || time(device, runs, || forward(4, &stg, false)))?;
    Ok(BenchReport {
        device: format!("{device:?}"),
        dtype: format!("{kind:?}"),
        video_tokens: n,
        audio_tokens: na,
        forward_s: median(&mut fwd_t),
        step_s: median(&mut step_t),
        weight_bytes: model.linears().iter().map(|l| l.bytes()).sum(),
        peak_allocated_bytes: fastvideo_layers::measure::peak_of(&memory, &["step"], |p| p.peak_allocated_bytes),
        memory,
    })
}
