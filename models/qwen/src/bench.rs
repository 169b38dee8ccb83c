//! Timings of a language model at real size: time to first token for one prompt, and decode
//! tokens/s with B requests decoding together (one batched forward per step), the figures
//! `fastvideo bench-lm` prints and `host/scripts/gpu/lm_bench.sh` sets beside transformers'.

use std::time::Instant;

use anyhow::Result;
use std::sync::Arc;

use fastvideo_layers::measure::sync;
use fastvideo_pipeline::token::{CausalLm, DecodeParams, Generation, KvBlockPool, KvStore, PagedKv};
use serde::Serialize;

use crate::QwenForCausalLM;

/// What to measure.
pub struct LmBenchOptions {
    /// Prompt length of the time-to-first-token run.
    pub prompt_len: usize,
    /// Batch sizes of the decode runs.
    pub batches: Vec<usize>,
    /// Prompt length of each request in the decode runs (prefilled, not timed).
    pub decode_prompt_len: usize,
    /// Decode steps timed per batch size (after two warm-up steps).
    pub steps: usize,
}

/// Decode timings at one batch size.
#[derive(Debug, Serialize)]
pub struct DecodeFigure {
    /// Requests decoding together.
    pub batch: usize,
    /// Seconds per batched decode step (mean over the timed steps).
    pub step_s: f64,
    /// Tokens per second over the batch: `batch / step_s`.
    pub tokens_per_s: f64,
    /// The first request's greedy tokens, to compare runs (CUDA graphs on and off).
    pub first_tokens: Vec<i64>,
}

/// What [`run`] measured, as `fastvideo bench-lm` prints it (JSON).
#[derive(Debug, Serialize)]
pub struct LmBenchReport {
    /// The device it ran on.
    pub device: String,
    /// The model's compute dtype.
    pub dtype: String,
    /// Parameters of the model, so a report names the size it measured.
    pub params: i64,
    /// Prompt length of the time-to-first-token run.
    pub prompt_len: usize,
    /// Prefill of `prompt_len` tokens and the first token, median of 3 after a warm-up.
    pub ttft_s: f64,
    /// One figure per batch size, in the options' order.
    pub decode: Vec<DecodeFigure>,
}

fn prompt(len: usize, seed: usize, vocab: i64) -> Vec<i64> {
    (0..len).map(|i| ((i * 7919 + seed * 104_729) as i64) % vocab.max(1)).collect()
}

/// Measures time to first token and batched decode (synthetic prompts, greedy) on `model`.
pub fn run(model: &QwenForCausalLM, opts: &LmBenchOptions) -> Result<LmBenchReport> {
    let device = model.device();
    let vocab = model.config.vocab_size;
    let greedy = DecodeParams { max_tokens: u32::MAX / 2, ..Default::default() };
    let _guard = tch::no_grad_guard();
    let mut ttft = Vec::new();
    for run in 0..4 {
        let mut g = Generation::new(model, prompt(opts.prompt_len, run, vocab), &greedy, &[])?;
        sync(device);
        let t0 = Instant::now();
        while g.tokens().is_empty() {
            g.step(model, device, opts.prompt_len)?;
        }
        sync(device);
        if run > 0 {
            ttft.push(t0.elapsed().as_secs_f64());
        }
    }
    ttft.sort_by(f64::total_cmp);
    // Decode batches run on a paged pool, as the serving loop does: one attention per layer
    // over every request's pages.
    let block = 16;
    let per_request = (opts.decode_prompt_len + opts.steps + 8) as i64;
    let most = opts.batches.iter().copied().max().unwrap_or(1) as i64;
    let blocks = (most * ((per_request + block - 1) / block) + most) as usize;
    let pool = Arc::new(KvBlockPool::new(model.kv_shape(), block, blocks, device, model.kind()));
    let mut decode = Vec::new();
    for &b in &opts.batches {
        let mut gens: Vec<Generation> = (0..b)
            .map(|i| {
                let cache = Box::new(PagedKv::new(pool.clone()));
                Generation::with_cache(model, cache, prompt(opts.decode_prompt_len, 10 + i, vocab), &greedy, &[])
            })
            .collect::<Result<_>>()?;
        for g in &mut gens {
            while !g.decoding() {
                g.step(model, device, opts.decode_prompt_len)?;
            }
        }
        let step = |gens: &mut Vec<Generation>| -> Result<()> {
            let tokens: Vec<i64> = gens.iter().map(|g| g.decode_input()).collect();
            let logits = {
                let mut caches: Vec<&mut dyn KvStore> = gens.iter_mut().map(|g| g.cache_mut()).collect();
                CausalLm::forward_decode(model, &tokens, &mut caches)?
            };
            let mut rows: Vec<&mut Generation> = gens.iter_mut().collect();
            for token in Generation::absorb_batch(&mut rows, &logits) {
                token?;
            }
            Ok(())
        };
        step(&mut gens)?;
        step(&mut gens)?;
        sync(device);
        let t0 = Instant::now();
        for _ in 0..opts.steps {
            step(&mut gens)?;
        }
        sync(device);
        let step_s = t0.elapsed().as_secs_f64() / opts.steps.max(1) as f64;
        let first_tokens = gens[0].tokens().to_vec();
        decode.push(DecodeFigure { batch: b, step_s, tokens_per_s: b as f64 / step_s, first_tokens });
    }
    Ok(LmBenchReport {
        device: format!("{device:?}"),
        dtype: format!("{:?}", model.kind()),
        params: model.parameter_count(),
        prompt_len: opts.prompt_len,
        ttft_s: ttft[ttft.len() / 2],
        decode,
    })
}
