//! Time of one CFG step of the transformer for each parallel layout, side by side in one
//! process on the same weights and inputs, with each layout's output against the one-device
//! output: what `fastvideo bench-parallel` prints and `host/scripts/gpu/parallel.sh` records.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use fastvideo_layers::measure::sync_all;
use fastvideo_parallel::{ParallelMode, ParallelPlan};
use serde::Serialize;
use tch::{Device, Kind, Tensor};

use crate::parallel::{LoadOn, ParallelTransformer};
use crate::transformer::WanTransformer3DModel;

/// A layout to measure: `--gpus` and `--parallel` as the CLI takes them.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    /// GPUs the step is split over.
    pub gpus: usize,
    /// How they split it; `None` for one GPU.
    pub mode: Option<ParallelMode>,
}

impl std::str::FromStr for Layout {
    type Err = String;
    /// `1`, or `MODE:N` (`sp:4`, `cfg:2`, `cfg+sp:4`).
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "1" {
            return Ok(Self { gpus: 1, mode: None });
        }
        let (mode, n) = s.split_once(':').ok_or_else(|| format!("layout `{s}`: expected 1 or MODE:N, e.g. sp:4"))?;
        let gpus = n.parse().map_err(|_| format!("layout `{s}`: `{n}` is not a GPU count"))?;
        Ok(Self { gpus, mode: Some(mode.parse()?) })
    }
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.mode {
            None => write!(f, "1"),
            Some(ParallelMode::Cfg) => write!(f, "cfg:{}", self.gpus),
            Some(ParallelMode::Sp) => write!(f, "sp:{}", self.gpus),
            Some(ParallelMode::CfgSp) => write!(f, "cfg+sp:{}", self.gpus),
        }
    }
}

/// What to measure: the layouts, and the input every one of them runs.
pub struct ParallelBenchOptions {
    /// Latent grid `[C, F, H, W]` (before patching).
    pub latent: [i64; 4],
    /// Tokens of the text embeddings fed to cross-attention.
    pub text_len: i64,
    /// Layouts to measure, each against the one-device step.
    pub layouts: Vec<Layout>,
    /// Every rank on the first device (checks a layout's arithmetic and overhead on one GPU).
    pub one_device: bool,
    /// Timed steps per layout, after a warm-up.
    pub runs: usize,
    /// The guidance scale combining the two branches.
    pub guidance: f64,
    /// Both guidance branches as one forward of two rows on every layout (as the engine runs
    /// them when it batches), instead of one forward per branch where the layout allows.
    pub batch_branches: bool,
}

/// The figures of one layout.
#[derive(Debug, Serialize)]
pub struct LayoutReport {
    /// The layout, as given (`sp:4`).
    pub layout: String,
    /// Ranks it ran on.
    pub ranks: usize,
    /// Each rank's device.
    pub devices: Vec<String>,
    /// How the ranks exchanged tensors (NCCL or local copies).
    pub transport: String,
    /// Median seconds of one CFG step (both guidance branches and their combination).
    pub step_s: f64,
    /// Every timed step, in order.
    pub step_runs_s: Vec<f64>,
    /// One-device step time over this layout's.
    pub speedup: f64,
    /// `speedup / ranks`.
    pub efficiency: f64,
    /// max |this layout's guided output − the one-device output| / max |one-device output|.
    pub rel_err_vs_single: f64,
}

/// What a parallel bench measured, as it prints it (JSON).
#[derive(Debug, Serialize)]
pub struct ParallelBenchReport {
    /// Attention heads of the transformer measured.
    pub heads: i64,
    /// Its blocks.
    pub layers: i64,
    /// Its inner width.
    pub dim: i64,
    /// Video tokens per forward.
    pub tokens: i64,
    /// Its dtype.
    pub dtype: &'static str,
    /// Whether every rank ran on the first device.
    pub one_device: bool,
    /// The NCCL library's version, where it loaded.
    pub nccl_version: Option<i32>,
    /// One report per layout, in the options' order.
    pub layouts: Vec<LayoutReport>,
}

/// Runs every layout of `opts` with `first` (on its device, rank 0's) and `load` for the other
/// devices' replicas (each loaded once and reused across layouts).
pub fn run(
    first: Arc<WanTransformer3DModel>,
    load: &LoadOn<'_>,
    cuda_devices: usize,
    opts: &ParallelBenchOptions,
) -> Result<ParallelBenchReport> {
    let home = first.patch_device();
    let cfg = first.cfg.clone();
    let [c, f, h, w] = opts.latent;
    tch::manual_seed(11);
    let latents = Tensor::randn([1, c, f, h, w], (Kind::Float, Device::Cpu)).to_device(home);
    let cond = Tensor::randn([1, opts.text_len, cfg.text_dim], (Kind::Float, Device::Cpu)).to_device(home);
    let uncond = Tensor::randn([1, opts.text_len, cfg.text_dim], (Kind::Float, Device::Cpu)).to_device(home);
    let t1 = Tensor::from_slice(&[600f32]).to_device(home);
    let both = (Tensor::cat(&[&latents, &latents], 0), Tensor::cat(&[&t1, &t1], 0), Tensor::cat(&[&cond, &uncond], 0));
    let [pt, ph, pw] = cfg.patch_size;
    let tokens = f / pt * (h / ph) * (w / pw);

    let cache: RefCell<HashMap<Device, Arc<WanTransformer3DModel>>> = RefCell::new(HashMap::new());
    let memo = |d: Device| -> Result<Arc<WanTransformer3DModel>> {
        if let Some(t) = cache.borrow().get(&d) {
            return Ok(Arc::clone(t));
        }
        let t = load(d)?;
        cache.borrow_mut().insert(d, Arc::clone(&t));
        Ok(t)
    };

    let mut reports: Vec<LayoutReport> = Vec::new();
    let mut single: Option<(f64, Tensor)> = None;
    for layout in &opts.layouts {
        let plan = ParallelPlan::new(layout.gpus, layout.mode)?;
        let devices = plan.devices(home, cuda_devices, opts.one_device)?;
        let parallel = if plan.is_single() {
            None
        } else {
            Some(ParallelTransformer::new(plan, devices.clone(), Arc::clone(&first), &memo)?)
        };
        let transport = match &parallel {
            None => "none".to_string(),
            Some(_) if plan.sp == 1 => "peer copies".to_string(),
            Some(p) => format!("{:?}", p.transport()),
        };
        let step = || -> Result<Tensor> {
            let (pc, pu) = match &parallel {
                Some(p) if plan.cfg > 1 || opts.batch_branches => {
                    let out = p.forward(&both.0, &both.1, &both.2, None)?;
                    (out.get(0).unsqueeze(0), out.get(1).unsqueeze(0))
                }
                None if opts.batch_branches => {
                    let out = first.forward(&both.0, &both.1, &both.2)?;
                    (out.get(0).unsqueeze(0), out.get(1).unsqueeze(0))
                }
                Some(p) => (p.forward(&latents, &t1, &cond, None)?, p.forward(&latents, &t1, &uncond, None)?),
                None => (first.forward(&latents, &t1, &cond)?, first.forward(&latents, &t1, &uncond)?),
            };
            Ok(&pu + (pc - &pu) * opts.guidance)
        };
        let mut out = step()?; // warm-up: kernels, rotary tables, NCCL buffers
        sync_all(&devices);
        let mut times = Vec::with_capacity(opts.runs);
        for _ in 0..opts.runs.max(1) {
            let t0 = Instant::now();
            out = step()?;
            sync_all(&devices);
            times.push(t0.elapsed().as_secs_f64());
        }
        let mut sorted = times.clone();
        sorted.sort_by(f64::total_cmp);
        let step_s = sorted[sorted.len() / 2];
        let out = out.to_kind(Kind::Float);
        let (base_s, rel) = match &single {
            Some((s, base)) => (*s, f64::try_from((&out - base).abs().max())? / f64::try_from(base.abs().max())?),
            None => {
                single = Some((step_s, out.shallow_clone()));
                (step_s, 0.0)
            }
        };
        let speedup = base_s / step_s;
        tracing::info!(%layout, step_s, speedup, rel, "layout measured");
        reports.push(LayoutReport {
            layout: layout.to_string(),
            ranks: plan.ranks(),
            devices: devices.iter().map(|d| format!("{d:?}")).collect(),
            transport,
            step_s,
            step_runs_s: times,
            speedup,
            efficiency: speedup / plan.ranks() as f64,
            rel_err_vs_single: rel,
        });
    }
    Ok(ParallelBenchReport {
        heads: cfg.num_attention_heads,
        layers: cfg.num_layers,
        dim: cfg.inner_dim(),
        tokens,
        dtype: fastvideo_torch::kind_name(first.kind()),
        one_device: opts.one_device,
        nccl_version: fastvideo_parallel::nccl::version().ok(),
        layouts: reports,
    })
}
