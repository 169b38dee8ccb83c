//! A checked pipeline graph lowered to the runs this runtime executes: one request per
//! sampler, with the outputs it feeds. Anything the graph asks for that the runtime does not
//! do is refused here, naming the node and the value. Where the sampler's latent comes from
//! decides the task (`source`); the sampling settings and the schedule are read here.

mod av;
mod chain;
mod edit;
mod run_plan;
mod source;

use serde_json::Value;

use fastvideo_request::SamplerKind;

pub use run_plan::{LoraPlan, ModelFile, OutputPlan, RunPlan};
use source::Source;

use crate::translate::{as_ref, GraphNode};
use crate::{CompileError, PipelineGraph};

/// ComfyUI sampler names we run, and as what (`lcm`: predict the clean sample, noise it afresh
/// to the next level, which is the `dmd` sampler; `euler_ancestral` as ComfyUI runs it on flow
/// models; their noise is ours, not ComfyUI's stream; `gradient_estimation` with its `ge_gamma` 2).
const SAMPLERS: &[(&str, SamplerKind)] = &[
    ("euler", SamplerKind::Euler),
    ("uni_pc", SamplerKind::Unipc),
    ("uni_pc_bh2", SamplerKind::Unipc),
    ("lcm", SamplerKind::Dmd),
    ("euler_ancestral", SamplerKind::EulerAncestral),
    ("gradient_estimation", SamplerKind::GradientEstimation),
];
/// ComfyUI schedules we run: the flow-matching sigma schedule with the model's shift (`simple`,
/// `normal`), and FLUX.2's shifted by the picture's size (`flux2`, `Flux2Scheduler`), which is
/// what a FLUX.2 folder's scheduler computes.
const SCHEDULERS: &[&str] = &["simple", "normal", "flux2"];
/// Added to a video-to-video strength so that `floor(steps · strength)` is the intended step
/// count despite float rounding (the request computes the start step that way).
const STRENGTH_EPS: f64 = 1e-9;

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

    /// Follows `model.shift`, `model.lora` and `model.cfg_norm` nodes to the loader; the shift
    /// nearest the sampler wins, and LoRAs stack in the order they are applied (loader side
    /// first). `CFGNorm` at strength 1 is what Qwen-Image's true CFG does itself (the guided
    /// prediction rescaled to the conditional one's norm); another strength is refused.
    fn model(
        &self,
        n: &GraphNode,
        param: &str,
        files: &mut Vec<ModelFile>,
        shift: &mut Option<f32>,
        loras: &mut Vec<LoraPlan>,
    ) -> Result<(), CompileError> {
        const FROM: [&str; 6] = [
            "model.shift",
            "model.lora",
            "model.lora_model",
            "model.cfg_norm",
            "load.diffusion_model",
            "load.checkpoint",
        ];
        let (mut m, _) = self.expect(n, param, &FROM)?;
        let mut stack = Vec::new();
        while m.stage.starts_with("model.") {
            if m.stage == "model.shift" {
                shift.get_or_insert(number(m, "shift")? as f32);
            } else if m.stage == "model.cfg_norm" {
                let s = number(m, "strength")?;
                if (s - 1.0).abs() > 1e-9 {
                    let msg = format!(
                        "CFGNorm strength {s}: this runtime's true CFG rescales to the conditional prediction's norm \
                         fully; set 1"
                    );
                    return Err(CompileError::node(&m.origin, msg));
                }
            } else {
                stack.push(LoraPlan {
                    node: m.origin.clone(),
                    file: text(m, "file")?,
                    strength: number(m, "strength")?,
                    expert: None,
                });
            }
            m = self.expect(m, "model", &FROM)?.0;
        }
        loras.extend(stack.into_iter().rev());
        push_file(files, self.file(m, "diffusion_model")?);
        Ok(())
    }

    /// The VAE `param` of `n` names.
    fn vae(&self, n: &GraphNode, param: &str, files: &mut Vec<ModelFile>) -> Result<(), CompileError> {
        let (vae, _) = self.expect(n, param, &["load.vae", "load.checkpoint"])?;
        push_file(files, self.file(vae, "vae")?);
        Ok(())
    }

    fn run(&self, sampler: &GraphNode, vae: &GraphNode) -> Result<RunPlan, CompileError> {
        let mut files = Vec::new();
        let mut shift = None;
        let mut loras = Vec::new();
        push_file(&mut files, self.file(vae, "vae")?);
        let mut experts = None;
        let chained = self.input(sampler, "latent").filter(|(p, _)| p.stage.starts_with("sample"));
        let (fields, cond_node, latent_of, partial) = match sampler.stage.as_str() {
            // The second of two samplers splitting one schedule: the run starts at the first.
            "sample" if chained.is_some() => {
                let first = chained.map(|(p, _)| p).expect("checked");
                experts = self.chain(first, sampler, &mut files, &mut shift, &mut loras)?.experts;
                (Fields::of(first, first, first, first, first)?, sampler, first, (0, u64::MAX))
            }
            "sample" => {
                for (k, want) in [("add_noise", true), ("return_noisy", false)] {
                    if let Some(v) = sampler.params.get(k).and_then(Value::as_bool).filter(|&v| v != want) {
                        return Err(CompileError::node(
                            &sampler.origin,
                            format!("`{k}: {v}`: partial denoising is not supported"),
                        ));
                    }
                }
                let start = sampler.params.get("start_step").and_then(Value::as_u64).unwrap_or(0);
                let end = sampler.params.get("end_step").and_then(Value::as_u64).unwrap_or(u64::MAX);
                self.model(sampler, "model", &mut files, &mut shift, &mut loras)?;
                (Fields::of(sampler, sampler, sampler, sampler, sampler)?, sampler, sampler, (start, end))
            }
            _ => {
                let (noise, _) = self.expect(sampler, "noise", &["noise.random"])?;
                let (guider, _) = self.expect(sampler, "guider", &["guider.cfg"])?;
                let (select, _) = self.expect(sampler, "sampler", &["sampler.select"])?;
                let (sched, _) = self.expect(sampler, "sigmas", &["schedule", "schedule.flux2"])?;
                self.model(guider, "model", &mut files, &mut shift, &mut loras)?;
                (Fields::of(noise, sched, guider, select, sched)?, guider, sampler, (0, u64::MAX))
            }
        };
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
        let mut refs = Vec::new();
        let (prompt, pos_via) = self.conditioning(cond_node, "positive", &mut files, &mut refs)?;
        if prompt.is_none() && self.input(cond_node, "positive").is_some_and(|(p, _)| p.stage == "encode.zero") {
            return Err(CompileError::node(
                &cond_node.origin,
                "`positive` is zeroed out (ConditioningZeroOut): nothing to draw",
            ));
        }
        let mut negative_refs = Vec::new();
        let (negative, neg_via) = self.conditioning(cond_node, "negative", &mut files, &mut negative_refs)?;
        edit::same_references(cond_node, &refs, &negative_refs)?;
        let zeroed = self.input(cond_node, "negative").is_some_and(|(p, _)| p.stage == "encode.zero");
        if zeroed && fields.cfg > 1.0 {
            let msg = format!(
                "`negative` is zeroed out (ConditioningZeroOut) with cfg {}: guiding away from zeroed embeddings is not \
                 supported; set cfg 1 (no guidance) or encode an empty prompt",
                fields.cfg
            );
            return Err(CompileError::node(&cond_node.origin, msg));
        }
        let via = match (pos_via, neg_via) {
            (Some(p), Some(n)) if p.origin != n.origin => {
                let msg = format!(
                    "`positive` passes through node {} and `negative` through node {}: one image-to-video node conditions a run",
                    p.origin, n.origin
                );
                return Err(CompileError::node(&cond_node.origin, msg));
            }
            (None, Some(n)) => {
                let msg = format!("`negative` passes through node {} but `positive` does not", n.origin);
                return Err(CompileError::node(&cond_node.origin, msg));
            }
            (p, _) => p,
        };
        let (latent, _) = self.need(latent_of, "latent")?;
        let source = self.source(sampler, latent, via, &refs, &mut files)?;
        let (steps, strength) = schedule(sampler, &fields, partial, &source)?;
        let mut plan = RunPlan {
            sampler_node: sampler.origin.clone(),
            latent_node: latent.origin.clone(),
            size_node: latent.origin.clone(),
            task: source.task(),
            files,
            prompt: prompt.unwrap_or_default(),
            negative,
            seed: fields.seed,
            steps,
            strength,
            cfg: fields.cfg,
            sampler: kind,
            shift,
            loras,
            width: None,
            height: None,
            frames: None,
            fps: None,
            fps_node: None,
            fps_from_video: false,
            images: Vec::new(),
            size_from: None,
            video: None,
            outputs: Vec::new(),
            switch_step: experts.map(|e| e.0),
            cfg_2: experts.map(|e| e.1),
            node_params: Default::default(),
            knobs: Default::default(),
        };
        let size_from = edit::size_from(&source, &refs);
        source.fill(&mut plan)?;
        if !refs.is_empty() {
            (plan.task, plan.images, plan.size_from) = (fastvideo_request::TaskType::I2i, refs, size_from);
        }
        flux2_schedule_fits(self, sampler, &plan)?;
        Ok(plan)
    }
}

/// A `Flux2Scheduler` shifts its sigmas by its own width and height: they must be the run's, or
/// the run would take another schedule than the workflow's (the model shifts by the picture's).
/// Sizes the graph computes (`GetImageSize`) must be the latent's own.
fn flux2_schedule_fits(l: &Lowering, sampler: &GraphNode, plan: &RunPlan) -> Result<(), CompileError> {
    let Some((sched, _)) = l.input(sampler, "sigmas").filter(|(s, _)| s.stage == "schedule.flux2") else {
        return Ok(());
    };
    let latent = l.input(sampler, "latent").map(|(n, _)| n);
    let mismatch = |what: String| {
        let msg = format!(
            "its schedule is for {what}: FLUX.2 shifts the schedule by the picture's size; give the scheduler the \
             latent's width and height"
        );
        Err(CompileError::node(&sched.origin, msg))
    };
    for (k, want) in [("width", plan.width), ("height", plan.height)] {
        match (sched.params.get(k).and_then(Value::as_f64), want) {
            (Some(v), Some(w)) if v as u32 != w => {
                let (sw, sh) = (number(sched, "width")?, number(sched, "height")?);
                let (pw, ph) = (plan.width.unwrap_or(0), plan.height.unwrap_or(0));
                return mismatch(format!("{sw}×{sh} but the latent is {pw}×{ph}"));
            }
            (Some(_), Some(_)) => {}
            // A computed size: the same value the latent reads.
            _ if latent.is_some_and(|n| n.params.get(k).is_some() && n.params.get(k) == sched.params.get(k)) => {}
            _ => return mismatch(format!("another {k} than the latent's")),
        }
    }
    Ok(())
}

/// The schedule a run takes, as (steps, video-to-video strength). ComfyUI's `denoise` d with s
/// steps runs s steps over the end of an `int(s / d)`-step schedule; a `KSamplerAdvanced`
/// starting at step k of s runs the last s − k. Both become diffusers' `strength` over the
/// whole schedule, which only a latent encoded from a video can take.
fn schedule(
    sampler: &GraphNode,
    fields: &Fields,
    (start, end): (u64, u64),
    source: &Source,
) -> Result<(u32, Option<f64>), CompileError> {
    let steps = fields.steps;
    let err = |m: String| CompileError::node(&sampler.origin, m);
    if end < steps as u64 {
        return Err(err(format!(
            "steps {start}..{end} of {steps}: partial schedules (chained samplers) are not supported yet"
        )));
    }
    let to_video = matches!(source, Source::Video(_));
    if start > 0 {
        if !to_video || start >= steps as u64 {
            return Err(err(format!(
                "steps {start}..{end} of {steps}: starting mid-schedule needs a latent from VAEEncode of a video (video to video) and at least one step"
            )));
        }
        let strength = (steps as u64 - start) as f64 / steps as f64;
        return Ok((steps, Some((strength + STRENGTH_EPS).min(1.0))));
    }
    let d = fields.denoise;
    if (d - 1.0).abs() <= 1e-6 {
        return Ok((steps, to_video.then_some(1.0)));
    }
    if !to_video {
        return Err(err(format!(
            "denoise {d}: below 1 needs a latent from VAEEncode of a video (video to video); an empty latent is denoised fully"
        )));
    }
    if !(d > 0.0 && d < 1.0) {
        return Err(err(format!("denoise {d} must be in (0, 1]")));
    }
    let total = (steps as f64 / d).floor() as u32;
    Ok((total, Some((steps as f64 / total as f64 + STRENGTH_EPS).min(1.0))))
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
    for out in g.nodes.iter().filter(|n| n.stage.starts_with("output.") && n.stage != "output.preview") {
        let prefix = out.params.get("prefix").and_then(Value::as_str).unwrap_or("ComfyUI").to_string();
        let (images_of, kind, fps) = if out.stage == "output.video" {
            let (video, _) = l.expect(out, "video", &["video.create"])?;
            (video, "video", Fps::of(&l, video))
        } else {
            if let Some(f) = out.params.get("format").and_then(Value::as_str).filter(|f| *f != "png") {
                let msg = format!("`{f}` image output is not supported; use SaveVideo (MP4) or SaveImage (PNG)");
                return Err(CompileError::node(&out.origin, msg));
            }
            (out, "image", Fps::None)
        };
        let (decode, _) = l.expect(images_of, "images", &["decode.vae"])?;
        let (vae, _) = l.expect(decode, "vae", &["load.vae", "load.checkpoint"])?;
        // LTX-2: the video half of a latent that carries sound (`LTXVSeparateAVLatent`).
        let av = l.input(decode, "latent").filter(|(p, _)| p.stage == "latent.av_separate").is_some();
        let sampler = match av {
            true => l.separated(decode, "latent", 0)?,
            false => l.expect(decode, "latent", &["sample", "sample.custom"])?.0,
        };
        // LTX-2's sound goes into the video; another source's (an input video's) is not carried.
        let audio = match (kind, l.input(images_of, "audio")) {
            ("video", Some(_)) if av => Some(l.audio_of(images_of, sampler)?),
            _ => None,
        };
        let plan = OutputPlan { node: out.origin.clone(), kind, prefix, audio: audio.is_some() };
        if let Some(run) = runs.iter_mut().find(|r| r.sampler_node == sampler.origin) {
            run.outputs.push(plan);
            if run.fps.is_none() && !run.fps_from_video {
                fps.set(run);
            }
            continue;
        }
        let mut run = match av {
            true => l.av_run(sampler, vae, audio, images_of)?,
            false => l.run(sampler, vae)?,
        };
        fps.set(&mut run);
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

/// The frame rate a `video.create` node sets: a number, or the input video's (its `fps` read
/// from `video.components`).
enum Fps {
    None,
    Value(f32, String),
    FromVideo(String),
}

impl Fps {
    fn of(l: &Lowering, video: &GraphNode) -> Self {
        match (video.params.get("fps").and_then(Value::as_f64), l.input(video, "fps")) {
            (Some(f), _) => Fps::Value(f as f32, video.origin.clone()),
            (None, Some((p, 2))) if p.stage == "video.components" => Fps::FromVideo(video.origin.clone()),
            _ => Fps::None,
        }
    }

    fn set(self, run: &mut RunPlan) {
        match self {
            Fps::None => {}
            Fps::Value(f, node) => (run.fps, run.fps_node) = (Some(f), Some(node)),
            Fps::FromVideo(node) => (run.fps_from_video, run.fps_node) = (true, Some(node)),
        }
    }
}
