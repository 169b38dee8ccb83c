//! FLUX.2 [klein] at real size with random weights: one forward, a guidance step, a whole
//! request through the pipeline (prompt, steps, decode) with its peak memory, and the packing
//! gain on a stream of mixed sizes (one at a time, same-size batches, one packed forward).
//! What `examples/flux2_bench.rs` prints and `host/scripts/gpu/image_bench.sh` sets beside
//! diffusers eager and torch.compile.

use std::path::Path;
use std::sync::Arc;

use anyhow::Result;
use fastvideo_layers::flow_match::FlowMatchConfig;
use fastvideo_layers::measure::{median, phase, time, PhaseMemory};
use fastvideo_pipeline::{PipelineRun, Values};
use fastvideo_request::{OmniRequest, TaskType};
use fastvideo_torch::weights::Weights;
use serde::Serialize;
use tch::{Device, Kind, Tensor};

use crate::config::{PipelineConfig, TransformerConfig, VaeConfig};
use crate::model::Flux2Model;
use crate::packed::{positions, text_positions, Sample};
use crate::prompt::{PromptEncoder, MAX_TOKENS};
use crate::transformer::Flux2Transformer;
use crate::vae::Flux2Vae;

/// What to measure.
pub struct BenchOptions {
    /// Output size in pixels.
    pub height: i64,
    /// Output size in pixels.
    pub width: i64,
    /// Steps of the whole request.
    pub steps: u32,
    /// Timed runs of each measurement (after one warm-up).
    pub runs: usize,
    /// The mixed stream: `(height, width)` of each request.
    pub mixed: Vec<(i64, i64)>,
    /// A tokenizer folder (any Qwen tokenizer: prompts are padded to 512 tokens).
    pub tokenizer: std::path::PathBuf,
}

/// Times of the mixed stream's forwards (one step of every request).
#[derive(Debug, Serialize)]
pub struct PackingReport {
    /// `(height, width)` of each request.
    pub sizes: Vec<(i64, i64)>,
    /// Every request alone.
    pub one_at_a_time_s: f64,
    /// Requests of one size batched, sizes one after another.
    pub same_size_batches_s: f64,
    /// Every request in one packed forward.
    pub packed_s: f64,
}

/// The figures, in seconds and bytes.
#[derive(Debug, Serialize)]
pub struct BenchReport {
    /// Device.
    pub device: String,
    /// Compute dtype.
    pub dtype: String,
    /// Image tokens of the picture.
    pub image_tokens: i64,
    /// One forward of one sample (a distilled model's step).
    pub forward_s: f64,
    /// Both guidance branches as one packed forward (a base model's step).
    pub cfg_step_s: f64,
    /// The whole request: prompt, `steps` steps without guidance, decode (median).
    pub end_to_end_s: f64,
    /// Its nodes' seconds (last run).
    pub nodes: Vec<(String, f64)>,
    /// The same request as an edit of one 1024² reference picture (median).
    pub edit_s: f64,
    /// Peak allocated bytes over the edit.
    pub edit_peak_allocated_bytes: Option<u64>,
    /// Peak allocated bytes over the whole request.
    pub peak_allocated_bytes: Option<u64>,
    /// The mixed stream.
    pub packing: PackingReport,
    /// Per-phase memory.
    pub memory: Vec<PhaseMemory>,
}

/// The model of the configs in `dir` (`transformer.json`, `text_encoder.json`, `vae.json`,
/// `scheduler.json`) with random weights, step-distilled.
pub fn random_model(dir: &Path, tokenizer: &Path, device: Device, kind: Kind) -> Result<Flux2Model> {
    let tcfg = TransformerConfig::load(&dir.join("transformer.json"))?;
    let transformer = Arc::new(Flux2Transformer::new(tcfg, &Weights::random(1, device, kind))?);
    let vae = Arc::new(Flux2Vae::new(VaeConfig::load(&dir.join("vae.json"))?, &Weights::random(2, device, kind))?);
    let qcfg = fastvideo_qwen::QwenConfig::load(&dir.join("text_encoder.json"))?;
    let lm = fastvideo_qwen::QwenForCausalLM::from_weights(qcfg, &Weights::random(3, device, kind))?;
    let prompt = Arc::new(PromptEncoder::new(lm, tokenizer)?);
    let scheduler = FlowMatchConfig::load(&dir.join("scheduler.json"))?;
    Ok(Flux2Model { transformer, vae, prompt, scheduler, pipeline: PipelineConfig { is_distilled: true } })
}

/// One sample's inputs at `h`×`w` pixels.
struct Inputs {
    image: Tensor,
    ids: Tensor,
    text: Tensor,
    text_ids: Tensor,
}

fn inputs(m: &Flux2Model, h: i64, w: i64, device: Device) -> Inputs {
    let p = m.pixels_per_token();
    let c = m.transformer.config();
    let kind = m.transformer.kind();
    let (th, tw) = (h / p, w / p);
    Inputs {
        image: Tensor::randn([th * tw, c.in_channels], (kind, device)),
        ids: positions(0, th, tw, device),
        text: Tensor::randn([MAX_TOKENS as i64, c.joint_attention_dim], (kind, device)),
        text_ids: text_positions(MAX_TOKENS as i64, device),
    }
}

fn sample(i: &Inputs) -> Sample<'_> {
    Sample { image: &i.image, text: &i.text, timestep: 0.75, image_ids: &i.ids, text_ids: &i.text_ids }
}

/// A `w`×`h` reference picture (a colour gradient).
pub fn gradient(w: u32, h: u32) -> fastvideo_request::InputImage {
    let rgb = (0..h)
        .flat_map(|y| (0..w).flat_map(move |x| [(x * 255 / w) as u8, (y * 255 / h) as u8, ((x + y) % 256) as u8]))
        .collect();
    fastvideo_request::InputImage { role: fastvideo_request::ImageRole::Reference, width: w, height: h, rgb }
}

/// Builds the model of `dir` with random weights on `device` in `kind` and measures.
pub fn run(dir: &Path, device: Device, kind: Kind, o: &BenchOptions) -> Result<BenchReport> {
    let m = random_model(dir, &o.tokenizer, device, kind)?;
    let _guard = tch::no_grad_guard();
    let runs = o.runs.max(1) + 1;
    let skip = |mut v: Vec<f64>| {
        v.remove(0);
        median(&mut v)
    };
    let mut memory = Vec::new();
    // Seeded: runs with the fused kernels on and off compare the same inputs.
    tch::manual_seed(11);
    let one = inputs(&m, o.height, o.width, device);
    let (fwd, _) = phase(device, "forward", &mut memory, || {
        time(device, runs, || Ok(m.transformer.forward_packed(&[sample(&one)])))
    })?;
    let (cfg, _) = phase(device, "cfg_step", &mut memory, || {
        time(device, runs, || Ok(m.transformer.forward_packed(&[sample(&one), sample(&one)])))
    })?;
    // The whole request through the runtime's pipeline.
    let spec = Arc::new(crate::pipeline::spec(&m)?);
    let mut r = OmniRequest::text_to_video("bench", "a red fox in the snow");
    r.task = TaskType::T2i;
    (r.diffusion.height, r.diffusion.width) = (Some(o.height as u32), Some(o.width as u32));
    r.diffusion.num_inference_steps = Some(o.steps);
    r.diffusion.guidance_scale = Some(1.0);
    let req = r.resolve(&m.limits(), || 0)?;
    let mut nodes = Vec::new();
    let (e2e, _) = phase(device, "end_to_end", &mut memory, || {
        time(device, runs, || {
            let mut run = PipelineRun::new(spec.clone(), req.clone(), device, Values::default(), Default::default());
            run.run_to_end(&mut |_| {})?;
            let out = run.finish(&mut |_| {})?;
            nodes = out.metrics.node_seconds.clone();
            Ok(())
        })
    })?;
    // One forward's prediction, for comparing runs (fused kernels on and off), when asked.
    if let Some(path) = std::env::var_os("IMAGE_BENCH_DUMP") {
        let pred = m.transformer.forward_packed(&[sample(&one)]).remove(0).to_device(Device::Cpu);
        Tensor::write_safetensors(&[("pred", &pred)], std::path::Path::new(&path))?;
    }
    let peak = memory.iter().find(|p| p.phase == "end_to_end").and_then(|p| p.peak_allocated_bytes);
    let mut edit = req.clone();
    edit.task = TaskType::I2i;
    edit.images = vec![gradient(1024, 1024)];
    let (edit_t, _) = phase(device, "edit", &mut memory, || {
        time(device, runs, || {
            let mut run = PipelineRun::new(spec.clone(), edit.clone(), device, Values::default(), Default::default());
            run.run_to_end(&mut |_| {})?;
            run.finish(&mut |_| {}).map(drop)
        })
    })?;
    let edit_peak = memory.iter().find(|p| p.phase == "edit").and_then(|p| p.peak_allocated_bytes);
    // The mixed stream: one step of every request, three ways.
    let stream: Vec<Inputs> = o.mixed.iter().map(|&(h, w)| inputs(&m, h, w, device)).collect();
    let (solo, _) = time(device, runs, || {
        for i in &stream {
            m.transformer.forward_packed(&[sample(i)]);
        }
        Ok(())
    })?;
    let mut sizes: Vec<(i64, i64)> = o.mixed.clone();
    sizes.sort();
    sizes.dedup();
    let (grouped, _) = time(device, runs, || {
        for s in &sizes {
            let group: Vec<Sample> =
                stream.iter().zip(&o.mixed).filter(|(_, hw)| *hw == s).map(|(i, _)| sample(i)).collect();
            m.transformer.forward_packed(&group);
        }
        Ok(())
    })?;
    let (packed, _) = phase(device, "packed_stream", &mut memory, || {
        time(device, runs, || Ok(m.transformer.forward_packed(&stream.iter().map(sample).collect::<Vec<_>>())))
    })?;
    Ok(BenchReport {
        device: format!("{device:?}"),
        dtype: format!("{kind:?}"),
        image_tokens: one.image.size()[0],
        forward_s: skip(fwd),
        cfg_step_s: skip(cfg),
        end_to_end_s: skip(e2e),
        nodes,
        edit_s: skip(edit_t),
        edit_peak_allocated_bytes: edit_peak,
        peak_allocated_bytes: peak,
        packing: PackingReport {
            sizes: o.mixed.clone(),
            one_at_a_time_s: skip(solo),
            same_size_batches_s: skip(grouped),
            packed_s: skip(packed),
        },
        memory,
    })
}
