//! `fastvideo bench`: component timings of a model at one shape (transformer forward, CFG step,
//! text encode, VAE decode, load), printed as one JSON object, for the GPU benchmark
//! (`host/scripts/gpu/bench.sh`), which sets them beside diffusers' from the same run.

use std::collections::HashMap;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use fastvideo_wan::bench::{self, BenchOptions};
use fastvideo_wan::family::LoadedWan;
use fastvideo_wan::WanModel;
use tch::Tensor;

use crate::args::BenchModelArgs;

#[derive(Args)]
pub struct BenchArgs {
    #[command(flatten)]
    target: BenchModelArgs,
    /// Timed runs per transformer figure (median reported), after one warm-up.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Timed runs of the VAE decode.
    #[arg(long, default_value_t = 2)]
    vae_runs: usize,
    /// safetensors with `latents`, `timestep`, `context` (optional `vae_latents`) to run on.
    #[arg(long)]
    inputs: Option<PathBuf>,
    /// Write the transformer's output for the inputs (`velocity`, float32) here.
    #[arg(long)]
    outputs: Option<PathBuf>,
    /// Also decode in float32 and report the VAE dtype's PSNR against it.
    #[arg(long)]
    vae_compare: bool,
    /// Print the report as JSON (the default is a short human summary as well).
    #[arg(long)]
    json: bool,
    /// Time every forward with these LoRA adapters (files; unmerged).
    #[command(flatten)]
    lora: crate::lora::LoraArgs,
}

/// The Wan model `target` names: the component benchmarks time Wan's own parts (its
/// transformer, text encoder and VAE), so they take the family's model, not the seam's.
pub fn wan_model(target: &BenchModelArgs) -> Result<WanModel> {
    let loaded = target.load()?;
    match loaded.as_any().downcast_ref::<LoadedWan>() {
        Some(w) => Ok(w.model.share()),
        None => {
            anyhow::bail!("--model: the component benchmarks time Wan models; this is a {}", loaded.summary().family)
        }
    }
}

pub fn run(args: BenchArgs) -> Result<()> {
    let inputs: HashMap<String, Tensor> = match &args.inputs {
        Some(p) => Tensor::read_safetensors(p)
            .map_err(|e| anyhow::anyhow!("--inputs {}: {e}", p.display()))?
            .into_iter()
            .collect(),
        None => HashMap::new(),
    };
    let model = wan_model(&args.target)?;
    let shape = &args.target.shape;
    let opts = BenchOptions {
        frames: shape.frames,
        height: shape.height,
        width: shape.width,
        runs: args.runs,
        vae_runs: args.vae_runs,
        inputs,
        vae_compare: args.vae_compare,
        adapters: args.lora.set(std::sync::Arc::new(fastvideo_wan::adapters::WanAdapters::of(&model)))?,
    };
    let mut report = bench::run(&model, &opts)?;
    if let (Some(path), Some(v)) = (&args.outputs, report.velocity.take()) {
        Tensor::write_safetensors(&[("velocity", v)], path).with_context(|| format!("--outputs {}", path.display()))?;
    }
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!(
            "{} {} ({} tokens): forward {:.3} s, CFG step {:.3} s, text encode {:.3} s, VAE decode ({}) {:.3} s, load {:.2} s, SDPA {}",
            report.device,
            report.transformer_dtype,
            report.tokens,
            report.forward_s,
            report.cfg_step_s,
            report.text_encode_s,
            report.vae_dtype,
            report.vae_decode_s,
            report.load_s,
            report.sdpa_backend
        );
        if let (Some(which), Some(s)) = (report.tiny_decoder, report.tiny_decode_s) {
            let psnr =
                report.tiny_psnr_vs_vae_db.map(|p| format!(", {p:.1} dB against the full decoder")).unwrap_or_default();
            let chunks = match (report.tiny_decode_chunk_frames, report.tiny_decode_one_pass_s) {
                (Some(c), Some(one)) => format!(" in chunks of {c} latent frames ({one:.3} s in one pass)"),
                _ => String::new(),
            };
            println!("tiny decoder ({which}): {s:.3} s for the same latents{chunks}{psnr}");
        }
        for line in memory_lines(&report) {
            println!("{line}");
        }
        if let (Some(f2), Some(sw)) = (report.expert_2_forward_s, report.expert_switch_forward_s) {
            println!("low-noise expert: forward {f2:.3} s; alternating experts {sw:.3} s per forward");
            if let (Some(s), Some(b)) = (report.expert_swap_s, report.expert_switch_blocking_forward_s) {
                let exact = report.expert_switch_exact.map_or("-", |e| if e { "yes" } else { "NO" });
                println!(
                    "offloaded experts: {s:.3} s of host time per swap; with blocking swaps {b:.3} s per forward; \
                     the forward after a streamed swap equals the resident one: {exact}"
                );
            }
        }
    }
    Ok(())
}

fn gib(b: u64) -> String {
    format!("{:.2}", b as f64 / (1u64 << 30) as f64)
}

/// The human summary's memory lines: each phase's peaks (allocator view), or the driver's used
/// memory after each phase where the allocator cannot be read, and the same-work peak.
fn memory_lines(r: &bench::BenchReport) -> Vec<String> {
    if r.phase_memory.is_empty() || r.phase_memory.iter().all(|p| p.driver_used_after_bytes.is_none()) {
        return Vec::new(); // CPU: nothing to report
    }
    let mut out = Vec::new();
    if r.memory_view == "allocator" {
        out.push(
            "device memory per phase, GiB (libtorch allocator; cache emptied and peaks reset before each):".into(),
        );
        for p in &r.phase_memory {
            let (Some(s), Some(a), Some(v)) = (p.start_allocated_bytes, p.peak_allocated_bytes, p.peak_reserved_bytes)
            else {
                continue;
            };
            out.push(format!(
                "  {:<21} peak allocated {:>6}  peak reserved {:>6}  (at start {})",
                p.phase,
                gib(a),
                gib(v),
                gib(s)
            ));
        }
        if let (Some(a), Some(v)) = (r.same_work_peak_allocated_bytes, r.same_work_peak_reserved_bytes) {
            out.push(format!(
                "same work as diffusers_mem.py (text encode, CFG step, VAE decode): peak allocated {} GiB, reserved {} GiB",
                gib(a),
                gib(v)
            ));
        }
    } else {
        let after: Vec<String> = r
            .phase_memory
            .iter()
            .filter_map(|p| p.driver_used_after_bytes.map(|b| format!("{} {}", p.phase, gib(b))))
            .collect();
        out.push(format!(
            "device memory used after each phase, GiB (driver's view, no peaks: no CUDA-graph shim): {}",
            after.join(", ")
        ));
    }
    out
}
