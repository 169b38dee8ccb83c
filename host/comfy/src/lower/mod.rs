//! A checked pipeline graph lowered to the runs this runtime executes: one request per
//! sampler, with the outputs it feeds. Anything the graph asks for that the runtime does not
//! do is refused here, naming the node and the value.

use serde::Serialize;
use serde_json::Value;

use fastvideo_request::{OmniRequest, SamplerKind, TaskType};

use crate::translate::{as_ref, GraphNode};
use crate::{CompileError, PipelineGraph};

/// ComfyUI sampler names we run, and as what.
const SAMPLERS: &[(&str, SamplerKind)] =
    &[("euler", SamplerKind::Euler), ("uni_pc", SamplerKind::Unipc), ("uni_pc_bh2", SamplerKind::Unipc)];
/// ComfyUI schedules we run: both are the flow-matching sigma schedule with the model's shift.
const SCHEDULERS: &[&str] = &["simple", "normal"];

/// A model file a loader names, for the deploy's file → folder map.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelFile {
    /// The loader node.
    pub node: String,
    /// `diffusion_model`, `text_encoder`, `vae` or `checkpoint`.
    pub role: &'static str,
    /// The file name as the workflow gives it.
    pub file: String,
}

/// What an output node writes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutputPlan {
    /// The output node (`SaveVideo`, `SaveImage`, …).
    pub node: String,
    /// `video` or `image`.
    pub kind: &'static str,
    /// File name prefix (`video/ComfyUI`), as ComfyUI names its outputs.
    pub prefix: String,
}

/// One sampler's run: everything a request needs, and the outputs it feeds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunPlan {
    /// The sampler node.
    pub sampler_node: String,
    /// The node setting width, height and frames (the empty latent).
    pub latent_node: String,
    /// Text to video, or to image.
    pub task: TaskType,
    /// The model files its loaders name.
    pub files: Vec<ModelFile>,
    /// Prompt and negative prompt.
    pub prompt: String,
    /// Empty when no negative conditioning is connected.
    pub negative: String,
    /// Seed, steps, guidance scale, solver.
    pub seed: u64,
    /// Solver steps.
    pub steps: u32,
    /// Classifier-free guidance scale.
    pub cfg: f32,
    /// The solver.
    pub sampler: SamplerKind,
    /// The flow shift a `ModelSamplingSD3` sets; the model's default when none.
    pub shift: Option<f32>,
    /// Output size.
    pub width: u32,
    /// Output size.
    pub height: u32,
    /// Frames (1 for an image).
    pub frames: u32,
    /// Frame rate of the video output, if one sets it.
    pub fps: Option<f32>,
    /// The node setting it (`CreateVideo`).
    pub fps_node: Option<String>,
    /// The output nodes this run feeds.
    pub outputs: Vec<OutputPlan>,
}

impl RunPlan {
    /// The node a request field (`diffusion.width`, as a request error names it) came from,
    /// so an error can name it: size and frames from the empty latent, the rest the sampler.
    pub fn node_of(&self, field: &str) -> &str {
        match field {
            "diffusion.width" | "diffusion.height" | "diffusion.num_frames" => &self.latent_node,
            "diffusion.fps" => self.fps_node.as_deref().unwrap_or(&self.sampler_node),
            _ => &self.sampler_node,
        }
    }

    /// The request for this run.
    pub fn request(&self, request_id: &str) -> OmniRequest {
        let mut r = OmniRequest::text_to_video(request_id, self.prompt.clone());
        r.task = self.task;
        r.sampling.seed = Some(self.seed);
        r.sampling.sampler = Some(self.sampler);
        let d = &mut r.diffusion;
        d.num_inference_steps = Some(self.steps);
        d.guidance_scale = Some(self.cfg);
        d.shift = self.shift;
        d.width = Some(self.width);
        d.height = Some(self.height);
        d.num_frames = Some(self.frames);
        d.fps = self.fps.map(|f| f.round().max(1.0) as u32);
        d.negative_prompt = (!self.negative.is_empty()).then(|| self.negative.clone());
        r
    }
}

struct Lowering<'a> {
    g: &'a PipelineGraph,
}

impl<'a> Lowering<'a> {
    /// The node making the value `param` of `n` refers to, and which output it is.
    fn input(&self, n: &GraphNode, param: &str) -> Option<(&'a GraphNode, usize)> {
        as_ref(n.params.get(param)?).and_then(|r| self.g.producer(r))
    }

    fn need(&self, n: &GraphNode, param: &str) -> Result<(&'a GraphNode, usize), CompileError> {
        self.input(n, param).ok_or_else(|| CompileError::node(&n.origin, format!("`{param}` is not connected")))
    }

    fn expect(&self, n: &GraphNode, param: &str, stages: &[&str]) -> Result<(&'a GraphNode, usize), CompileError> {
        let (p, k) = self.need(n, param)?;
        if !stages.contains(&p.stage.as_str()) {
            let msg = format!(
                "`{param}` comes from node {} (`{}`); this runtime runs it from {}",
                p.origin,
                p.stage,
                stages.join(" or ")
            );
            return Err(CompileError::node(&n.origin, msg));
        }
        Ok((p, k))
    }

    fn file(&self, n: &GraphNode, role: &'static str) -> Result<ModelFile, CompileError> {
        let file = text(n, "file")?;
        Ok(ModelFile {
            node: n.origin.clone(),
            role: if n.stage == "load.checkpoint" { "checkpoint" } else { role },
            file,
        })
    }

    /// Follows `model.shift` nodes to the loader; the shift nearest the sampler wins.
    fn model(
        &self,
        n: &GraphNode,
        param: &str,
        files: &mut Vec<ModelFile>,
        shift: &mut Option<f32>,
    ) -> Result<(), CompileError> {
        let (mut m, _) = self.expect(n, param, &["model.shift", "load.diffusion_model", "load.checkpoint"])?;
        while m.stage == "model.shift" {
            shift.get_or_insert(number(m, "shift")? as f32);
            m = self.expect(m, "model", &["model.shift", "load.diffusion_model", "load.checkpoint"])?.0;
        }
        push_file(files, self.file(m, "diffusion_model")?);
        Ok(())
    }

    fn text(&self, n: &GraphNode, param: &str, files: &mut Vec<ModelFile>) -> Result<Option<String>, CompileError> {
        let Some((e, _)) = self.input(n, param) else { return Ok(None) };
        if e.stage != "encode.text" {
            let msg = format!(
                "`{param}` comes from node {} (`{}`); this runtime conditions on text (`encode.text`) only",
                e.origin, e.stage
            );
            return Err(CompileError::node(&n.origin, msg));
        }
        let (enc, _) = self.expect(e, "text_encoder", &["load.text_encoder", "load.checkpoint"])?;
        push_file(files, self.file(enc, "text_encoder")?);
        Ok(Some(text(e, "text")?))
    }

    fn run(&self, sampler: &GraphNode, vae: &GraphNode) -> Result<RunPlan, CompileError> {
        let mut files = Vec::new();
        let mut shift = None;
        push_file(&mut files, self.file(vae, "vae")?);
        let (fields, cond_node, latent_of) = match sampler.stage.as_str() {
            "sample" => {
                for (k, want) in [("add_noise", true), ("return_noisy", false)] {
                    if let Some(v) = sampler.params.get(k).and_then(Value::as_bool).filter(|&v| v != want) {
                        return Err(CompileError::node(
                            &sampler.origin,
                            format!("`{k}: {v}`: partial denoising is not supported"),
                        ));
                    }
                }
                let steps = number(sampler, "steps")? as u32;
                let start = sampler.params.get("start_step").and_then(Value::as_u64).unwrap_or(0);
                let end = sampler.params.get("end_step").and_then(Value::as_u64).unwrap_or(u64::MAX);
                if start > 0 || end < steps as u64 {
                    let msg = format!(
                        "steps {start}..{end} of {steps}: partial schedules (chained samplers) are not supported yet"
                    );
                    return Err(CompileError::node(&sampler.origin, msg));
                }
                self.model(sampler, "model", &mut files, &mut shift)?;
                (Fields::of(sampler, sampler, sampler, sampler, sampler)?, sampler, sampler)
            }
            _ => {
                let (noise, _) = self.expect(sampler, "noise", &["noise.random"])?;
                let (guider, _) = self.expect(sampler, "guider", &["guider.cfg"])?;
                let (select, _) = self.expect(sampler, "sampler", &["sampler.select"])?;
                let (sched, _) = self.expect(sampler, "sigmas", &["schedule"])?;
                self.model(guider, "model", &mut files, &mut shift)?;
                (Fields::of(noise, sched, guider, select, sched)?, guider, sampler)
            }
        };
        if (fields.denoise - 1.0).abs() > 1e-6 {
            let msg =
                format!("denoise {}: only full denoising (1.0) from an empty latent is supported", fields.denoise);
            return Err(CompileError::node(&sampler.origin, msg));
        }
        let kind = SAMPLERS.iter().find(|(n, _)| *n == fields.sampler).map(|&(_, k)| k).ok_or_else(|| {
            let names: Vec<&str> = SAMPLERS.iter().map(|(n, _)| *n).collect();
            CompileError::node(
                &fields.sampler_node,
                format!("sampler `{}` is not one this runtime runs ({})", fields.sampler, names.join(", ")),
            )
        })?;
        if !SCHEDULERS.contains(&fields.scheduler.as_str()) {
            let msg =
                format!("scheduler `{}` is not one this runtime runs ({})", fields.scheduler, SCHEDULERS.join(", "));
            return Err(CompileError::node(&fields.scheduler_node, msg));
        }
        let prompt = self.text(cond_node, "positive", &mut files)?.unwrap_or_default();
        let negative = self.text(cond_node, "negative", &mut files)?.unwrap_or_default();
        let (latent, _) = self.need(latent_of, "latent")?;
        match latent.stage.as_str() {
            "latent.empty" => {}
            "sample" | "sample.custom" => {
                let msg = format!(
                    "its latent comes from sampler node {}: chained samplers are not supported yet",
                    latent.origin
                );
                return Err(CompileError::node(&sampler.origin, msg));
            }
            other => {
                let msg = format!(
                    "its latent comes from node {} (`{other}`); only an empty latent (text to video) is supported",
                    latent.origin
                );
                return Err(CompileError::node(&sampler.origin, msg));
            }
        }
        let batch = latent.params.get("batch").and_then(Value::as_u64).unwrap_or(1);
        if batch != 1 {
            return Err(CompileError::node(
                &latent.origin,
                format!("batch_size {batch}: one video per request; set 1"),
            ));
        }
        let frames = latent.params.get("frames").and_then(Value::as_u64);
        Ok(RunPlan {
            sampler_node: sampler.origin.clone(),
            latent_node: latent.origin.clone(),
            task: if frames.is_some() { TaskType::T2v } else { TaskType::T2i },
            files,
            prompt,
            negative,
            seed: fields.seed,
            steps: fields.steps,
            cfg: fields.cfg,
            sampler: kind,
            shift,
            width: number(latent, "width")? as u32,
            height: number(latent, "height")? as u32,
            frames: frames.unwrap_or(1) as u32,
            fps: None,
            fps_node: None,
            outputs: Vec::new(),
        })
    }
}

/// The sampling settings, wherever the graph keeps them.
struct Fields {
    seed: u64,
    steps: u32,
    cfg: f32,
    sampler: String,
    sampler_node: String,
    scheduler: String,
    scheduler_node: String,
    denoise: f64,
}

impl Fields {
    fn of(
        seed: &GraphNode,
        steps: &GraphNode,
        cfg: &GraphNode,
        sampler: &GraphNode,
        sched: &GraphNode,
    ) -> Result<Self, CompileError> {
        let seed_v = seed.params.get("seed").and_then(Value::as_u64);
        Ok(Fields {
            seed: seed_v.ok_or_else(|| CompileError::node(&seed.origin, "`seed` must be a whole number ≥ 0"))?,
            steps: number(steps, "steps")? as u32,
            cfg: number(cfg, "cfg")? as f32,
            sampler: text(sampler, "sampler")?,
            sampler_node: sampler.origin.clone(),
            scheduler: text(sched, "scheduler")?,
            scheduler_node: sched.origin.clone(),
            denoise: sched.params.get("denoise").and_then(Value::as_f64).unwrap_or(1.0),
        })
    }
}

fn number(n: &GraphNode, k: &str) -> Result<f64, CompileError> {
    n.params
        .get(k)
        .and_then(Value::as_f64)
        .ok_or_else(|| CompileError::node(&n.origin, format!("`{k}` must be a number")))
}

fn text(n: &GraphNode, k: &str) -> Result<String, CompileError> {
    match n.params.get(k) {
        Some(Value::String(s)) => Ok(s.clone()),
        _ => Err(CompileError::node(&n.origin, format!("`{k}` must be text"))),
    }
}

fn push_file(files: &mut Vec<ModelFile>, f: ModelFile) {
    if !files.contains(&f) {
        files.push(f);
    }
}

/// Lowers `g` to runs, one per sampler that feeds an output node. A graph with no output node
/// would produce nothing and is refused.
pub fn plan(g: &PipelineGraph) -> Result<Vec<RunPlan>, CompileError> {
    let l = Lowering { g };
    let mut runs: Vec<RunPlan> = Vec::new();
    for out in g.nodes.iter().filter(|n| n.stage.starts_with("output.")) {
        let prefix = out.params.get("prefix").and_then(Value::as_str).unwrap_or("ComfyUI").to_string();
        let (images_of, kind, fps) = if out.stage == "output.video" {
            let (video, _) = l.expect(out, "video", &["video.create"])?;
            let fps = video.params.get("fps").and_then(Value::as_f64).map(|f| (f as f32, video.origin.clone()));
            (video, "video", fps)
        } else {
            if let Some(f) = out.params.get("format").and_then(Value::as_str).filter(|f| *f != "png") {
                let msg = format!("`{f}` image output is not supported; use SaveVideo (MP4) or SaveImage (PNG)");
                return Err(CompileError::node(&out.origin, msg));
            }
            (out, "image", None)
        };
        let (decode, _) = l.expect(images_of, "images", &["decode.vae"])?;
        let (sampler, _) = l.expect(decode, "latent", &["sample", "sample.custom"])?;
        let (vae, _) = l.expect(decode, "vae", &["load.vae", "load.checkpoint"])?;
        let plan = OutputPlan { node: out.origin.clone(), kind, prefix };
        if let Some(run) = runs.iter_mut().find(|r| r.sampler_node == sampler.origin) {
            run.outputs.push(plan);
            if run.fps.is_none() {
                (run.fps, run.fps_node) = fps.map_or((None, None), |(f, n)| (Some(f), Some(n)));
            }
            continue;
        }
        let mut run = l.run(sampler, vae)?;
        (run.fps, run.fps_node) = fps.map_or((None, None), |(f, n)| (Some(f), Some(n)));
        run.outputs.push(plan);
        runs.push(run);
    }
    if runs.is_empty() {
        return Err(CompileError::Graph(
            "no output node (SaveVideo, SaveImage, …): the workflow would produce nothing".into(),
        ));
    }
    Ok(runs)
}
