//! `fastvideo bench-formats`: one Wan transformer shape with its linear weights in each stored
//! format — the compute dtype, FP8 (`--fp8-linears`), and GGUF block formats kept quantized on
//! the device — timed on the same inputs: per forward, per CFG step, weight and peak memory;
//! and the GGUF decode kernel against the host decoder (bit for bit in float32) with its
//! throughput. Random weights: the formats' cost does not depend on the values, and a 14B
//! model's files are not at hand on the GPU machine (`host/scripts/gpu/formats.sh`).

use std::time::Instant;

use anyhow::{bail, Result};
use fastvideo_layers::measure::{median, phase, sync, time, PhaseMemory};
use fastvideo_torch::weights::GgmlType;
use serde::Serialize;
use tch::{Device, Kind, Tensor};

use crate::transformer::{TransformerConfig, WanTransformer3DModel};
use crate::Weights;

/// A linear-weight format to time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum WeightFormat {
    /// The compute dtype.
    Dense,
    /// FP8 e4m3 with per-channel scales, the inner blocks (`--fp8-linears`).
    Fp8,
    /// ggml blocks kept on the device (GGUF files).
    Ggml(GgmlType),
}

impl std::str::FromStr for WeightFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "dense" | "bf16" => Ok(Self::Dense),
            "fp8" => Ok(Self::Fp8),
            other => GgmlType::ALL
                .into_iter()
                .find(|t| t.is_quantized() && t.to_string().eq_ignore_ascii_case(other))
                .map(Self::Ggml)
                .ok_or_else(|| format!("unknown format `{s}` (dense, fp8, q8_0, q6_k, q5_k, q5_0, q4_k, q4_0, …)")),
        }
    }
}

impl std::fmt::Display for WeightFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Dense => f.write_str("dense"),
            Self::Fp8 => f.write_str("fp8"),
            Self::Ggml(t) => write!(f, "{t}"),
        }
    }
}

/// What to measure.
pub struct FormatsBenchOptions {
    /// `[C, T, H, W]` of the latents.
    pub latent: [i64; 4],
    /// Text tokens of the context.
    pub text_len: i64,
    /// Timed repetitions (median reported), after one warm-up.
    pub runs: usize,
    /// The formats, timed in this order.
    pub formats: Vec<WeightFormat>,
}

/// One format's figures.
#[derive(Debug, Serialize)]
pub struct FormatRow {
    /// `dense`, `fp8` or a ggml type.
    pub format: String,
    /// Bytes the linears' weights hold on the device.
    pub linear_weight_bytes: u64,
    /// Live bytes after building the model (all weights and what the bench holds).
    pub loaded_allocated_bytes: Option<u64>,
    /// One forward (median).
    pub forward_s: f64,
    /// Every timed forward.
    pub forward_runs_s: Vec<f64>,
    /// Two forwards and their guidance combination (median).
    pub cfg_step_s: f64,
    /// Device memory per phase.
    pub memory: Vec<PhaseMemory>,
}

/// The decode kernel of one type on a `[13824, 5120]` weight (Wan-14B's FFN).
#[derive(Debug, Serialize)]
pub struct DecodeRow {
    /// The ggml type.
    pub format: String,
    /// Largest difference between the kernel's float32 output and the host decoder's (0: the
    /// same bits).
    pub f32_max_abs_diff: f64,
    /// Largest difference between the kernel's bf16 output and the host's float32 rounded to
    /// bf16.
    pub bf16_max_abs_diff: f64,
    /// Median seconds to decode the weight to bf16.
    pub decode_bf16_s: f64,
    /// Bytes of bf16 written per second.
    pub decode_bf16_bytes_per_s: f64,
}

/// Everything `bench-formats` measured.
#[derive(Debug, Serialize)]
pub struct FormatsReport {
    /// The device it ran on.
    pub device: String,
    /// The compute dtype.
    pub dtype: &'static str,
    /// Video tokens of one forward.
    pub tokens: i64,
    /// Whether our CUDA kernels (the GGUF decode among them) compiled and ran; without them
    /// GGUF blocks are decoded on the host.
    pub kernels: bool,
    /// One row per format, in the order asked.
    pub rows: Vec<FormatRow>,
    /// The decode kernel per ggml format asked.
    pub decode: Vec<DecodeRow>,
}

/// Runs the measurements for `cfg` on `dev` in `kind`.
pub fn run(cfg: &TransformerConfig, dev: Device, kind: Kind, opts: &FormatsBenchOptions) -> Result<FormatsReport> {
    let [c, t, h, w] = opts.latent;
    let [pt, ph, pw] = cfg.patch_size;
    tch::manual_seed(11);
    let latents = Tensor::randn([1, c, t, h, w], (kind, dev));
    let timestep = Tensor::from_slice(&[500.0f32]).to_device(dev);
    let context = Tensor::randn([1, opts.text_len, cfg.text_dim], (kind, dev));
    let uncond = Tensor::randn([1, opts.text_len, cfg.text_dim], (kind, dev));
    let mut rows = Vec::new();
    for &format in &opts.formats {
        let weights = match format {
            WeightFormat::Ggml(ty) => Weights::random_ggml(7, dev, kind, ty),
            _ => Weights::random(7, dev, kind),
        };
        let mut model = WanTransformer3DModel::new(cfg.clone(), &weights)?;
        if format == WeightFormat::Fp8 {
            model.quantize_fp8();
        }
        let linear_weight_bytes =
            model.linears().iter().map(|l| fastvideo_layers::linear::tensor_bytes(&l.weight)).sum();
        sync(dev);
        let loaded_allocated_bytes = allocated(dev);
        let mut memory = Vec::new();
        let (mut fw, _) = phase(dev, "forward", &mut memory, || {
            time(dev, opts.runs, || model.forward(&latents, &timestep, &context))
        })?;
        let forward_runs_s = fw.clone();
        let (mut cfg_s, _) = phase(dev, "cfg_step", &mut memory, || {
            time(dev, opts.runs, || {
                let cond = model.forward(&latents, &timestep, &context)?;
                let un = model.forward(&latents, &timestep, &uncond)?;
                Ok(&un + (cond - &un) * 5.0)
            })
        })?;
        rows.push(FormatRow {
            format: format.to_string(),
            linear_weight_bytes,
            loaded_allocated_bytes,
            forward_s: median(&mut fw),
            forward_runs_s,
            cfg_step_s: median(&mut cfg_s),
            memory,
        });
        eprintln!("{format}: forward {:.3} s", rows.last().map_or(0.0, |r| r.forward_s));
    }
    let mut decode = Vec::new();
    for &format in &opts.formats {
        if let WeightFormat::Ggml(ty) = format {
            decode.push(decode_row(ty, dev, opts.runs)?);
        }
    }
    Ok(FormatsReport {
        device: format!("{dev:?}"),
        dtype: fastvideo_torch::kind_name(kind),
        tokens: t / pt * (h / ph) * (w / pw),
        kernels: fastvideo_kernels::cuda::for_tensor(&latents).is_some(),
        rows,
        decode,
    })
}

fn allocated(dev: Device) -> Option<u64> {
    match dev {
        Device::Cuda(i) => fastvideo_kernels::cuda::allocator_memory(i).map(|m| m.allocated),
        _ => None,
    }
}

fn decode_row(ty: GgmlType, dev: Device, runs: usize) -> Result<DecodeRow> {
    let (out, inp) = (13824, 5120);
    let w = Weights::random_ggml(3, dev, Kind::BFloat16, ty).pp("probe");
    let lin = fastvideo_layers::Linear::new(&w, inp, out, false)?;
    if lin.ggml_types() != [ty] {
        bail!("{ty}: the probe linear did not keep its blocks");
    }
    let bytes = &lin.weight;
    let host = fastvideo_kernels::ggml::dequantize_on_host(bytes, ty, out * inp);
    let f32_out = Tensor::empty([out * inp], (Kind::Float, dev));
    fastvideo_kernels::ggml::dequantize_into(bytes, ty, &f32_out);
    let bf16_out = Tensor::empty([out * inp], (Kind::BFloat16, dev));
    fastvideo_kernels::ggml::dequantize_into(bytes, ty, &bf16_out);
    let f32_max_abs_diff = (f32_out.to_device(Device::Cpu) - &host).abs().max().double_value(&[]);
    let bf16_max_abs_diff = (bf16_out.to_device(Device::Cpu).to_kind(Kind::Float)
        - host.to_kind(Kind::BFloat16).to_kind(Kind::Float))
    .abs()
    .max()
    .double_value(&[]);
    let mut times = Vec::new();
    for _ in 0..runs.max(1) * 5 {
        sync(dev);
        let t0 = Instant::now();
        fastvideo_kernels::ggml::dequantize_into(bytes, ty, &bf16_out);
        sync(dev);
        times.push(t0.elapsed().as_secs_f64());
    }
    let s = median(&mut times);
    Ok(DecodeRow {
        format: ty.to_string(),
        f32_max_abs_diff,
        bf16_max_abs_diff,
        decode_bf16_s: s,
        decode_bf16_bytes_per_s: (out * inp * 2) as f64 / s,
    })
}
