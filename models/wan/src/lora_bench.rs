//! What LoRA costs on a loaded model at one shape (`fastvideo bench-lora`): random adapters of
//! each rank on every linear, the unmerged path at batch 1 and for a batch of requests with
//! different adapters (against running them one by one), merging and unmerging, and the time
//! from an adapter file on disk to its first forward.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{ensure, Result};
use fastvideo_lora::LoraFile;
use fastvideo_pipeline::{AdapterRows, AdapterSet, ModuleDelta, PreparedAdapter};
use serde::Serialize;
use tch::{Device, Kind, Tensor};

use crate::loader::WanModel;
use fastvideo_layers::measure::{median, sync, time};

/// What to measure.
pub struct LoraBenchOptions {
    /// Video frames the timed input stands for (`4k+1`).
    pub frames: i64,
    /// Video height in pixels.
    pub height: i64,
    /// Video width in pixels.
    pub width: i64,
    /// Adapter ranks to measure, each on every linear.
    pub ranks: Vec<i64>,
    /// Requests (each with its own adapter) in the mixed batch.
    pub batch: usize,
    /// Timed runs per figure, after one warm-up.
    pub runs: usize,
    /// Where to write the adapter file timed from disk to first forward.
    pub scratch: std::path::PathBuf,
}

/// Seconds are medians over the timed runs, after one warm-up.
#[derive(Debug, Serialize)]
pub struct LoraBenchReport {
    /// The device it ran on.
    pub device: String,
    /// The transformer's dtype.
    pub dtype: &'static str,
    /// Tokens of the forward's input.
    pub tokens: i64,
    /// Linear modules each adapter changes.
    pub modules: usize,
    /// One transformer forward without an adapter.
    pub base_forward_s: f64,
    /// One report per rank, in the options' order.
    pub ranks: Vec<RankReport>,
}

/// The figures for adapters of one rank.
#[derive(Debug, Serialize)]
pub struct RankReport {
    /// The adapters' rank.
    pub rank: i64,
    /// Device bytes one prepared adapter holds.
    pub adapter_bytes: u64,
    /// One forward with the adapter applied beside the weights (unmerged).
    pub unmerged_forward_s: f64,
    /// `unmerged / base - 1`, in percent.
    pub unmerged_overhead_pct: f64,
    /// Merging the adapter into the weights.
    pub merge_s: f64,
    /// Taking it out again.
    pub unmerge_s: f64,
    /// One forward with the adapter merged.
    pub merged_forward_s: f64,
    /// Steps after which merging (merge + unmerge once) costs less than running unmerged.
    pub merge_break_even_steps: f64,
    /// Largest |merged - unmerged| over the output, relative to the output's largest value.
    pub merged_vs_unmerged_rel: f64,
    /// `batch` requests with `batch` different adapters as one forward, against one by one.
    pub batch: usize,
    /// The `batch` requests as one forward, each row with its own adapter.
    pub batch_mixed_forward_s: f64,
    /// The same requests one forward each.
    pub one_by_one_s: f64,
    /// The adapter file as diffusers saves it: bytes, and the time to read, check and prepare it.
    pub file_bytes: u64,
    /// Reading, checking and preparing the file.
    pub load_prepare_s: f64,
    /// From the file on disk to the end of the first forward with it (load, prepare, forward).
    pub first_forward_s: f64,
}

/// A random adapter of `rank` on every linear of the model, on its device and dtype.
fn random_adapter(model: &WanModel, rank: i64, seed: i64) -> PreparedAdapter {
    let t = &model.transformer;
    let dev = t.patch_device();
    tch::manual_seed(seed);
    let mut bytes = 0u64;
    let deltas = t
        .modules()
        .iter()
        .zip(t.module_kinds())
        .map(|(m, kind)| {
            let down = Tensor::randn([rank, m.in_dim], (kind, dev)) * (1.0 / (m.in_dim as f64).sqrt());
            let up = Tensor::randn([m.out_dim, rank], (kind, dev)) * 0.01;
            bytes += ((down.numel() + up.numel()) * kind.elt_size_in_bytes()) as u64;
            Some(ModuleDelta { low_rank: Some((down, up, 1.0)), diff: None, diff_b: None })
        })
        .collect();
    PreparedAdapter {
        name: format!("rank{rank}-{seed}"),
        hash: format!("random-{seed}"),
        deltas,
        text: Vec::new(),
        bytes,
    }
}

/// The adapter written as diffusers saves one (`transformer.<module>.lora_A/B.weight`).
fn write_file(model: &WanModel, adapter: &PreparedAdapter, path: &std::path::Path) -> Result<u64> {
    let mut named = Vec::new();
    for (m, d) in model.transformer.modules().iter().zip(&adapter.deltas) {
        if let Some(ModuleDelta { low_rank: Some((down, up, _)), .. }) = d {
            let cpu = |t: &Tensor| t.to_device(Device::Cpu).to_kind(Kind::BFloat16);
            named.push((format!("transformer.{}.lora_A.weight", m.name), cpu(down)));
            named.push((format!("transformer.{}.lora_B.weight", m.name), cpu(up)));
        }
    }
    Tensor::write_safetensors(&named, path)?;
    Ok(std::fs::metadata(path)?.len())
}

/// Runs every measurement.
pub fn run(model: &WanModel, opts: &LoraBenchOptions) -> Result<LoraBenchReport> {
    let t = &model.transformer;
    let dev = model.device;
    let (tf, sf) = (model.vae.cfg.temporal_factor(), model.vae.cfg.spatial_factor());
    ensure!((opts.frames - 1) % tf == 0, "--frames {} must be {tf}k+1", opts.frames);
    ensure!(t.cfg.image_dim.is_none(), "bench-lora times text-to-video models");
    let lat = [1, t.cfg.in_channels, (opts.frames - 1) / tf + 1, opts.height / sf, opts.width / sf];
    let len = model.max_sequence_length() as i64;
    tch::manual_seed(1);
    let latents = Tensor::randn(lat, (Kind::Float, dev));
    let context = Tensor::randn([1, len, t.cfg.text_dim], (Kind::Float, dev));
    let timestep = Tensor::from_slice(&[500f32]).to_device(dev);
    let [pt, ph, pw] = t.cfg.patch_size;
    let tokens = lat[2] / pt * (lat[3] / ph) * (lat[4] / pw);
    let forward = |x: &Tensor, ts: &Tensor, c: &Tensor, rows: Option<&AdapterRows>| {
        tch::no_grad(|| t.forward_adapted(x, ts, c, None, rows, None))
    };
    let (mut base, _) = time(dev, opts.runs, || forward(&latents, &timestep, &context, None))?;
    let base_forward_s = median(&mut base);
    let n = opts.batch.max(1);
    let (xb, tb, cb) =
        (latents.repeat([n as i64, 1, 1, 1, 1]), timestep.repeat([n as i64]), context.repeat([n as i64, 1, 1]));
    let mut ranks = Vec::new();
    for &rank in &opts.ranks {
        let sets: Vec<AdapterSet> =
            (0..n).map(|i| AdapterSet::new(vec![(Arc::new(random_adapter(model, rank, i as i64)), 0.8)])).collect();
        let adapter_bytes = sets[0].entries()[0].0.bytes;
        let one = AdapterRows::all(Some(&sets[0]), 1);
        let (mut un, unmerged) = time(dev, opts.runs, || forward(&latents, &timestep, &context, one.as_ref()))?;
        let unmerged_forward_s = median(&mut un);

        sync(dev);
        let t0 = Instant::now();
        t.merge_adapters(&sets[0])?;
        sync(dev);
        let merge_s = t0.elapsed().as_secs_f64();
        let (mut mf, merged) = time(dev, opts.runs, || forward(&latents, &timestep, &context, one.as_ref()))?;
        let merged_forward_s = median(&mut mf);
        let t0 = Instant::now();
        t.unmerge_adapters();
        sync(dev);
        let unmerge_s = t0.elapsed().as_secs_f64();
        let rel = |a: &Tensor, b: &Tensor| {
            let d = (a - b).abs().max().double_value(&[]);
            d / b.abs().max().double_value(&[]).max(1e-12)
        };
        let merged_vs_unmerged_rel = rel(&merged, &unmerged);
        drop((merged, unmerged));

        let mut rows = AdapterRows::default();
        for (i, s) in sets.iter().enumerate() {
            rows.push(Some(s), i as i64, 1);
        }
        let (mut bm, _) = time(dev, opts.runs, || forward(&xb, &tb, &cb, Some(&rows)))?;
        let batch_mixed_forward_s = median(&mut bm);
        let (mut obo, _) = time(dev, opts.runs, || {
            for s in &sets {
                let r = AdapterRows::all(Some(s), 1);
                drop(forward(&latents, &timestep, &context, r.as_ref())?);
            }
            Ok(())
        })?;
        let one_by_one_s = median(&mut obo);

        // A new adapter arrives as a file: read, check, prepare, first forward.
        let path = opts.scratch.join(format!("lora_rank{rank}.safetensors"));
        let file_bytes = write_file(model, &sets[0].entries()[0].0, &path)?;
        drop(sets);
        sync(dev);
        let t0 = Instant::now();
        let file = LoraFile::read(&path, &crate::lora_keys::WanKeys)?;
        let prepared = Arc::new(t.prepare_adapter(&file, "fresh", "h")?);
        sync(dev);
        let load_prepare_s = t0.elapsed().as_secs_f64();
        let set = AdapterSet::new(vec![(prepared, 0.8)]);
        let r = AdapterRows::all(Some(&set), 1);
        drop(forward(&latents, &timestep, &context, r.as_ref())?);
        sync(dev);
        let first_forward_s = t0.elapsed().as_secs_f64();
        let _ = std::fs::remove_file(&path);

        let overhead = unmerged_forward_s - merged_forward_s;
        ranks.push(RankReport {
            rank,
            adapter_bytes,
            unmerged_forward_s,
            unmerged_overhead_pct: 100.0 * (unmerged_forward_s / base_forward_s - 1.0),
            merge_s,
            unmerge_s,
            merged_forward_s,
            merge_break_even_steps: if overhead > 0.0 { (merge_s + unmerge_s) / overhead } else { f64::INFINITY },
            merged_vs_unmerged_rel,
            batch: n,
            batch_mixed_forward_s,
            one_by_one_s,
            file_bytes,
            load_prepare_s,
            first_forward_s,
        });
    }
    Ok(LoraBenchReport {
        device: format!("{dev:?}"),
        dtype: fastvideo_torch::kind_name(t.kind()),
        tokens,
        modules: t.modules().len(),
        base_forward_s,
        ranks,
    })
}
