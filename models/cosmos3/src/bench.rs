//! Timings of the transformer at real size with random weights: the prompt's pass (the prefix
//! the loop computes once), one generation forward, one classifier-free-guidance step (both
//! branches' forwards, batched) with and without the prefix cache, peak memory, and the
//! reasoner's decode rate on the same weights. What `fastvideo bench-cosmos3` prints and
//! `host/scripts/gpu/cosmos3_bench.sh` sets beside diffusers eager and torch.compile.

use std::path::Path;

use anyhow::Result;
use fastvideo_layers::measure::{median, phase, time, PhaseMemory};
use fastvideo_torch::weights::Weights;
use serde::Serialize;
use tch::{Device, Kind, Tensor};

use crate::config::Cosmos3Config;
use crate::packing::{pack, Layout};
use crate::transformer::{Cosmos3Transformer, GenInput};

/// What to measure.
pub struct BenchOptions {
    /// Output frames (`4k + 1`).
    pub frames: i64,
    /// Pixels.
    pub height: i64,
    /// Pixels.
    pub width: i64,
    /// Frame rate (positions and sound length).
    pub fps: f64,
    /// Prompt and negative prompt lengths in tokens.
    pub prompt_lens: (i64, i64),
    /// Sound latent frames (0: none).
    pub sound_frames: i64,
    /// Timed runs of each measurement (after one warm-up).
    pub runs: usize,
    /// Reasoner decode: prompt length and decode steps (0 steps: skipped).
    pub reasoner: (usize, usize),
}

/// The figures, in seconds and bytes.
#[derive(Debug, Serialize)]
pub struct BenchReport {
    /// Device and dtype.
    pub device: String,
    /// Compute dtype.
    pub dtype: String,
    /// Generation tokens of one branch (vision + sound).
    pub gen_tokens: i64,
    /// The prompt's pass over every layer, both branches (median).
    pub prefix_s: f64,
    /// One branch's generation forward (median).
    pub forward_s: f64,
    /// A CFG step: both branches' forwards batched, the prefixes cached (median).
    pub step_cached_s: f64,
    /// A CFG step as the reference runs it: both prompts' passes recomputed, then the forwards.
    pub step_uncached_s: f64,
    /// Bytes the cached keys and values of both prompts hold.
    pub prefix_bytes: u64,
    /// Weight bytes: `(text pathway, generation pathway)`.
    pub weight_bytes: (u64, u64),
    /// Peak allocated bytes over the step.
    pub peak_allocated_bytes: Option<u64>,
    /// Per-phase memory.
    pub memory: Vec<PhaseMemory>,
    /// The reasoner's decode on the same tensors (`fastvideo_qwen::bench`), when measured.
    pub reasoner: Option<fastvideo_qwen::bench::LmBenchReport>,
}

fn prompt(len: i64, vocab: i64, seed: i64) -> Vec<i64> {
    (0..len).map(|i| (i * 7919 + seed * 104_729) % vocab).collect()
}

/// Builds the transformer of `config` with random weights on `device` in `kind` and measures.
pub fn run(config: &Path, device: Device, kind: Kind, o: &BenchOptions) -> Result<BenchReport> {
    let cfg = Cosmos3Config::load(config)?;
    let model = Cosmos3Transformer::new(&Weights::random(7, device, kind), cfg.clone())?;
    let _guard = tch::no_grad_guard();
    let (t, h, w) = ((o.frames - 1) / 4 + 1, o.height / 16, o.width / 16);
    let layout = Layout {
        vision: [t, h, w],
        vision_clean: vec![],
        temporal_compression: 4,
        fps: o.fps,
        sound: (o.sound_frames > 0 && cfg.sound().is_some()).then_some(o.sound_frames),
        action: None,
    };
    let ids = [prompt(o.prompt_lens.0, cfg.vocab_size, 1), prompt(o.prompt_lens.1, cfg.vocab_size, 2)];
    let seqs = [pack(&cfg, ids[0].len() as i64, &layout)?, pack(&cfg, ids[1].len() as i64, &layout)?];
    let prefix_positions = |s: &fastvideo_pipeline::packed::PackedSeq| s.positions(device).narrow(1, 0, s.prefix_len());
    let prefixes = |model: &Cosmos3Transformer| -> Result<Vec<crate::Prefix>> {
        seqs.iter().zip(&ids).map(|(s, i)| model.prefix(i, &prefix_positions(s))).collect()
    };
    let vision = Tensor::randn([cfg.latent_channel, t, h, w], (Kind::Float, device));
    let sound = layout.sound.zip(cfg.sound()).map(|(n, d)| Tensor::randn([d, n], (Kind::Float, device)));
    let input = GenInput { vision: &vision, sound: sound.as_ref(), action: None, domain: None, timestep: 937.0 };
    let mut memory = Vec::new();
    let runs = o.runs.max(1) + 1;
    let (mut prefix_t, cached) = phase(device, "prefix", &mut memory, || time(device, runs, || prefixes(&model)))?;
    let refs: Vec<&crate::Prefix> = cached.iter().collect();
    let (mut fwd_t, _) = phase(device, "forward", &mut memory, || {
        time(device, runs, || model.forward(&[&seqs[0]], &refs[..1], &input))
    })?;
    let both = [&seqs[0], &seqs[1]];
    let (mut step_t, _) =
        phase(device, "cfg_step", &mut memory, || time(device, runs, || model.forward(&both, &refs, &input)))?;
    let (mut uncached_t, _) = phase(device, "cfg_step_uncached", &mut memory, || {
        time(device, runs, || {
            let fresh = prefixes(&model)?;
            let refs: Vec<&crate::Prefix> = fresh.iter().collect();
            model.forward(&both, &refs, &input)
        })
    })?;
    // For comparing runs (the fused kernels on and off): one step's predictions, when asked.
    if let Some(path) = std::env::var_os("COSMOS3_BENCH_DUMP") {
        let pred = model.forward(&both, &refs, &input)?;
        let mut named = vec![("vision", pred.vision.to_device(Device::Cpu))];
        if let Some(s) = pred.sound {
            named.push(("sound", s.to_device(Device::Cpu)));
        }
        Tensor::write_safetensors(&named, std::path::Path::new(&path))?;
    }
    let gen_tokens = seqs[0].len() - seqs[0].prefix_len();
    let peak =
        fastvideo_layers::measure::peak_of(&memory, &["cfg_step", "cfg_step_uncached"], |p| p.peak_allocated_bytes);
    let reasoner = match (o.reasoner.1, model.text_weights()) {
        (0, _) | (_, None) => None,
        (steps, Some(weights)) => {
            // No end-of-turn token: every timed step decodes.
            let qcfg = crate::reasoner::qwen_config(&cfg, -1);
            let lm = fastvideo_qwen::QwenForCausalLM::from_shared(qcfg, weights, kind);
            let opts = fastvideo_qwen::bench::LmBenchOptions {
                prompt_len: o.reasoner.0,
                batches: vec![1, 8],
                decode_prompt_len: o.reasoner.0,
                steps,
            };
            Some(fastvideo_qwen::bench::run(&lm, &opts)?)
        }
    };
    let skip = |v: &mut Vec<f64>| {
        v.remove(0);
        median(v)
    };
    Ok(BenchReport {
        device: format!("{device:?}"),
        dtype: format!("{kind:?}"),
        gen_tokens,
        prefix_s: skip(&mut prefix_t),
        forward_s: skip(&mut fwd_t),
        step_cached_s: skip(&mut step_t),
        step_uncached_s: skip(&mut uncached_t),
        prefix_bytes: cached.iter().map(crate::Prefix::bytes).sum(),
        weight_bytes: model.bytes(),
        peak_allocated_bytes: peak,
        memory,
        reasoner,
    })
}
