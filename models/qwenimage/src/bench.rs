//! Qwen-Image at real size with random weights: one forward, a true-CFG step (both branches
//! packed), and a whole request through the pipeline (prompt, steps with guidance, decode) with
//! its peak memory. What `examples/qwenimage_bench.rs` prints and
//! `host/scripts/gpu/image_bench.sh` sets beside diffusers eager and torch.compile.

use std::path::Path;
use std::sync::Arc;

use anyhow::Result;
use fastvideo_layers::flow_match::FlowMatchConfig;
use fastvideo_layers::measure::{median, phase, time, PhaseMemory};
use fastvideo_pipeline::{PipelineRun, Values};
use fastvideo_request::{OmniRequest, TaskType};
use fastvideo_torch::weights::Weights;
use fastvideo_wan::{AutoencoderKLWan, VaeConfig};
use serde::Serialize;
use tch::{Device, Kind, Tensor};

use crate::config::TransformerConfig;
use crate::model::QwenImageModel;
use crate::prompt::PromptEncoder;
use crate::transformer::{QwenImageTransformer, Sample};

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
    /// A tokenizer folder (any Qwen tokenizer).
    pub tokenizer: std::path::PathBuf,
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
    /// One forward, 128 prompt tokens.
    pub forward_s: f64,
    /// A true-CFG step: prompts of 128 and 16 tokens as one packed forward, and the combination.
    pub cfg_step_s: f64,
    /// The whole request with guidance (median).
    pub end_to_end_s: f64,
    /// Its nodes' seconds (last run).
    pub nodes: Vec<(String, f64)>,
    /// The same request as an Edit-Plus edit of one 1024² picture (median).
    pub edit_s: f64,
    /// Its nodes' seconds (last run).
    pub edit_nodes: Vec<(String, f64)>,
    /// Peak allocated bytes over the edit.
    pub edit_peak_allocated_bytes: Option<u64>,
    /// Peak allocated bytes over the whole request.
    pub peak_allocated_bytes: Option<u64>,
    /// Per-phase memory.
    pub memory: Vec<PhaseMemory>,
}

/// The model of the configs in `dir` (`transformer.json`, `text_encoder.json`, `vae.json`,
/// `scheduler.json`) with random weights.
pub fn random_model(dir: &Path, tokenizer: &Path, device: Device, kind: Kind) -> Result<QwenImageModel> {
    let tcfg = TransformerConfig::load(&dir.join("transformer.json"))?;
    let transformer = Arc::new(QwenImageTransformer::new(tcfg, &Weights::random(1, device, kind))?);
    let vae =
        Arc::new(AutoencoderKLWan::new(VaeConfig::load(&dir.join("vae.json"))?, &Weights::random(2, device, kind))?);
    let qcfg = fastvideo_qwen::QwenConfig::load(&dir.join("text_encoder.json"))?;
    let lm = fastvideo_qwen::QwenForCausalLM::from_weights(qcfg, &Weights::random(3, device, kind))?;
    let prompt = Arc::new(PromptEncoder::new(lm, tokenizer)?);
    let scheduler = FlowMatchConfig::load(&dir.join("scheduler.json"))?;
    Ok(QwenImageModel { transformer, vae, prompt, scheduler, edit: None, quantized_weights: None })
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
    let c = m.transformer.config();
    let p = m.pixels_per_token();
    let grid = [(o.height / p, o.width / p)];
    // Seeded: runs with the fused kernels on and off compare the same inputs.
    tch::manual_seed(11);
    let image = Tensor::randn([grid[0].0 * grid[0].1, c.in_channels], (kind, device));
    let text = Tensor::randn([128, c.joint_attention_dim], (kind, device));
    let negative = Tensor::randn([16, c.joint_attention_dim], (kind, device));
    let sample = |text| Sample { image: &image, grids: &grid, text, timestep: 0.75 };
    let (fwd, _) = phase(device, "forward", &mut memory, || {
        time(device, runs, || Ok(m.transformer.forward_packed(&[sample(&text)])))
    })?;
    let (cfg, _) = phase(device, "cfg_step", &mut memory, || {
        time(device, runs, || {
            let p = m.transformer.forward_packed(&[sample(&text), sample(&negative)]);
            Ok(crate::denoise::true_cfg(&p[0], &p[1], 4.0))
        })
    })?;
    let spec = Arc::new(crate::pipeline::spec(&m)?);
    let mut r = OmniRequest::text_to_video("bench", "a red fox in the snow");
    r.task = TaskType::T2i;
    (r.diffusion.height, r.diffusion.width) = (Some(o.height as u32), Some(o.width as u32));
    r.diffusion.num_inference_steps = Some(o.steps);
    r.diffusion.guidance_scale = Some(4.0);
    r.diffusion.negative_prompt = Some(" ".into());
    let req = r.resolve(&m.limits(), || 0)?;
    let mut nodes = Vec::new();
    let (e2e, _) = phase(device, "end_to_end", &mut memory, || {
        time(device, runs, || {
            let mut run = PipelineRun::new(spec.clone(), req.clone(), device, Values::default(), Default::default());
            run.run_to_end(&mut |_| {})?;
            nodes = run.finish(&mut |_| {})?.metrics.node_seconds;
            Ok(())
        })
    })?;
    // One forward's prediction, for comparing runs (fused kernels on and off), when asked.
    if let Some(path) = std::env::var_os("IMAGE_BENCH_DUMP") {
        let pred = m.transformer.forward_packed(&[sample(&text)]).remove(0).to_device(Device::Cpu);
        Tensor::write_safetensors(&[("pred", &pred)], std::path::Path::new(&path))?;
    }
    let peak = memory.iter().find(|p| p.phase == "end_to_end").and_then(|p| p.peak_allocated_bytes);
    // The same weights as an Edit-Plus model: a random vision tower beside them.
    let vcfg = fastvideo_qwen::vision::VisionConfig::load(&dir.join("text_encoder.json"))?;
    let vision = fastvideo_qwen::vision::VisionTower::new(vcfg, &Weights::random(4, device, kind).pp("visual"))?;
    let processor = fastvideo_qwen::vision::processor::ProcessorConfig::default();
    let te: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("text_encoder.json"))?)?;
    let pad = te.get("image_token_id").and_then(serde_json::Value::as_i64).unwrap_or(302);
    let sections = crate::edit::mrope_sections(&te)?;
    let encoder = crate::edit::EditEncoder::new(crate::edit::EditKind::EditPlus, vision, processor, pad, sections);
    let em = QwenImageModel { edit: Some(Arc::new(encoder)), ..m.share() };
    let espec = Arc::new(crate::pipeline::spec(&em)?);
    let mut edit = req.clone();
    edit.task = TaskType::I2i;
    edit.images = vec![fastvideo_request::InputImage {
        role: fastvideo_request::ImageRole::Reference,
        width: 1024,
        height: 1024,
        rgb: (0..1024u32 * 1024).flat_map(|i| [(i % 1024 / 4) as u8, (i / 1024 / 4) as u8, (i % 251) as u8]).collect(),
    }];
    let mut edit_nodes = Vec::new();
    let (edit_t, _) = phase(device, "edit", &mut memory, || {
        time(device, runs, || {
            let mut run = PipelineRun::new(espec.clone(), edit.clone(), device, Values::default(), Default::default());
            run.run_to_end(&mut |_| {})?;
            edit_nodes = run.finish(&mut |_| {})?.metrics.node_seconds;
            Ok(())
        })
    })?;
    let edit_peak = memory.iter().find(|p| p.phase == "edit").and_then(|p| p.peak_allocated_bytes);
    Ok(BenchReport {
        device: format!("{device:?}"),
        dtype: format!("{kind:?}"),
        image_tokens: image.size()[0],
        forward_s: skip(fwd),
        cfg_step_s: skip(cfg),
        end_to_end_s: skip(e2e),
        nodes,
        edit_s: skip(edit_t),
        edit_nodes,
        edit_peak_allocated_bytes: edit_peak,
        peak_allocated_bytes: peak,
        memory,
    })
}
