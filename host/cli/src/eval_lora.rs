//! `fastvideo eval --lora ADAPTER[=SCALE]`: what an adapter does to the default model's clips.
//! Each (scene, seed) is generated three times from the same noise: without the adapter, with it,
//! and with it at strength 0. Prints the object area the shipped adapter
//! (models/default-lora-large) is trained to grow, the four prompt attributes for both runs, and
//! how many strength-0 clips equal the plain ones byte for byte.

use std::io::Write;
use std::sync::Arc;

use anyhow::{Context, Result};
use fastvideo_pipeline::{AdapterSource, PipelineSpec, Values};
use fastvideo_procedural::{analyze, object_area, Clip, Scene, Tally};
use fastvideo_request::{LoraChoice, OmniRequest, ResolvedRequest};

/// One eval run's inputs.
pub struct LoraEval<'a> {
    pub scenes: &'a [Scene],
    pub seeds: u64,
    pub device: tch::Device,
    pub adapter: LoraChoice,
    pub sources: Vec<AdapterSource>,
    pub cache_mib: u64,
    pub json: bool,
}

fn clip(spec: &Arc<PipelineSpec>, req: ResolvedRequest, values: Values, device: tch::Device) -> Result<Clip> {
    let out = fastvideo_assembly::run_once(Arc::clone(spec), req, device, values, &mut |_| {})?;
    let v = out.video().context("the pipeline produced no video")?;
    Ok(Clip { frames: v.num_frames as usize, height: v.height as usize, width: v.width as usize, rgb: v.rgb.clone() })
}

/// Runs the eval; `build` makes the request of a scene and seed (sampling flags applied).
pub fn run(
    e: LoraEval,
    spec: Arc<PipelineSpec>,
    build: impl Fn(&Scene, u64) -> Result<OmniRequest>,
    resolve: impl Fn(OmniRequest, u64) -> Result<ResolvedRequest>,
) -> Result<()> {
    let (mut plain_tally, mut adapted_tally) = (Tally::default(), Tally::default());
    let (mut plain_area, mut adapted_area) = (Vec::new(), Vec::new());
    let mut zero_identical = 0usize;
    let total = e.scenes.len() as u64 * e.seeds;
    let bar = indicatif::ProgressBar::new(total);
    let with = |scale: f64| LoraChoice { name: e.adapter.name.clone(), scale: Some(scale), expert: None };
    let scale = e.adapter.scale.unwrap_or(1.0);
    for scene in e.scenes {
        for seed in 0..e.seeds {
            let plain = clip(&spec, resolve(build(scene, seed)?, seed)?, Values::default(), e.device)?;
            let mut runs = Vec::new();
            for s in [scale, 0.0] {
                let mut r = build(scene, seed)?;
                r.lora = vec![with(s)];
                let req = resolve(r, seed)?;
                let values = crate::lora::values(&spec, &req, e.sources.clone(), e.cache_mib)?;
                runs.push(clip(&spec, req, values, e.device)?);
            }
            zero_identical += (runs[1].rgb == plain.rgb) as usize;
            plain_area.push(object_area(&plain));
            adapted_area.push(object_area(&runs[0]));
            plain_tally.add(scene, &analyze(&plain));
            adapted_tally.add(scene, &analyze(&runs[0]));
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    // Large: over twice the plain data's mean area (0.06 of the frame).
    let large = |v: &[f64]| v.iter().filter(|&&a| a > 0.12).count() as f64 / v.len().max(1) as f64;
    let n = plain_area.len();
    eprintln!(
        "adapter `{}` at strength {scale}; {n} clips ({} scenes x {} seeds)",
        e.adapter.name,
        e.scenes.len(),
        e.seeds
    );
    eprintln!("| run | object area | large clips | colour | shape | motion | background | all four |");
    eprintln!("|---|---|---|---|---|---|---|---|");
    for (name, areas, tally) in [("no adapter", &plain_area, &plain_tally), ("adapter", &adapted_area, &adapted_tally)]
    {
        let a = tally.accuracy();
        eprintln!(
            "| {name} | {:.3} | {:.0}% | {:.1}% | {:.1}% | {:.1}% | {:.1}% | {:.1}% |",
            mean(areas),
            100.0 * large(areas),
            100.0 * a.color,
            100.0 * a.shape,
            100.0 * a.motion,
            100.0 * a.background,
            100.0 * a.all_correct
        );
    }
    eprintln!("strength 0 equals no adapter byte for byte: {zero_identical} of {n} clips");
    if e.json {
        let summary = serde_json::json!({
            "adapter": e.adapter.name, "scale": scale, "clips": n,
            "object_area": {"plain": mean(&plain_area), "adapter": mean(&adapted_area)},
            "large_fraction": {"plain": large(&plain_area), "adapter": large(&adapted_area)},
            "accuracy": {"plain": plain_tally.accuracy(), "adapter": adapted_tally.accuracy()},
            "zero_scale_identical": zero_identical,
        });
        let _ = writeln!(std::io::stdout().lock(), "{}", serde_json::to_string_pretty(&summary)?);
    }
    Ok(())
}
