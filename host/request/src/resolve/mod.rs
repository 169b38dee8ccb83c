use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{InputImage, InputPart, InputVideo, OmniRequest, OutputSpec, RequestError, SamplerKind, TaskType};

mod action;
mod audio;
mod bindings;
mod keyframes;
mod references;
mod schedule;
mod shape;
pub use action::{canvas, is_action_task, ActionCondition, ActionDomain, ActionLimits, CanvasBin, ResolvedAction};
pub use audio::AudioLimits;
pub use references::ReferenceLimits;
pub use schedule::{rcm_levels, RCM_SIGMA_MAX};
pub use shape::{PictureLimits, VideoLimits};

/// Latents a request supplies (row-major float32 values of `shape`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatentInput {
    /// Dimensions, outermost first.
    pub shape: Vec<i64>,
    /// Row-major values.
    pub data: Vec<f32>,
}

/// diffusers' `WanVideoToVideoPipeline` default `strength`.
pub const DEFAULT_STRENGTH: f64 = 0.8;

fn first_frame_only() -> Vec<crate::ImageRole> {
    vec![crate::ImageRole::FirstFrame]
}

fn full_strength() -> f64 {
    1.0
}

/// Parameter values a model uses when a request leaves them out. The same names as
/// `DiffusionParams`/`SamplingParams` (the request's optional overrides) and `ResolvedRequest`
/// (the concrete result): three stages of one value, each typed for what it can hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Defaults {
    /// Solver steps, for `diffusion.num_inference_steps`.
    pub steps: u32,
    /// Classifier-free guidance scale, for `diffusion.guidance_scale`.
    pub guidance_scale: f32,
    /// Flow-matching timestep shift, for `diffusion.shift`.
    pub shift: f32,
    /// Output height in pixels, for `diffusion.height` (unread without picture limits).
    pub height: u32,
    /// Output width in pixels, for `diffusion.width` (unread without picture limits).
    pub width: u32,
    /// Frame count, for `diffusion.num_frames` (`t2i` always uses 1; unread without video
    /// limits).
    pub num_frames: u32,
    /// Frames per second, for `diffusion.fps`.
    pub fps: u32,
    /// Solver, for `sampling.sampler`.
    pub sampler: SamplerKind,
    /// An explicit schedule (`diffusion.timesteps`), for models distilled to a few fixed steps;
    /// it sets the step count when a request gives neither a list nor a count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timesteps: Option<Vec<f64>>,
    /// Negative prompt used when the request gives none; empty means none.
    pub negative_prompt: String,
    /// The model's own knobs (`diffusion.<name>`): their types, defaults and rules, declared
    /// by its family (Wan 2.2 A14B: the expert knobs); empty for most models.
    #[serde(default, skip_serializing_if = "crate::KnobSchema::is_empty")]
    pub knobs: crate::KnobSchema,
}

/// What a model family accepts; checked before any work is done.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelLimits {
    /// Family name used in messages, e.g. `Wan`.
    pub family: String,
    /// Tasks the model runs; a request for any other is refused.
    pub tasks: Vec<TaskType>,
    /// The pictures an image-to-video request to this model must carry, each exactly once (Wan
    /// I2V: the first frame; FLF2V: the first and the last). Any other picture is refused.
    #[serde(default = "first_frame_only")]
    pub image_roles: Vec<crate::ImageRole>,
    /// The frame rule, for a model that makes video; `None` refuses frames (image and language
    /// models). Flattened: the wire keeps `frame_multiple` and `max_frames` beside the others.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub video: Option<VideoLimits>,
    /// The size rule, for a model that makes pictures; `None` refuses a size (language models).
    /// Flattened: the wire keeps `spatial_multiple` and `max_side` beside the others.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub picture: Option<PictureLimits>,
    /// The sound the model makes; `None` (most models) makes none and refuses
    /// `outputs.generate_sound: true`. Left off the wire when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio: Option<AudioLimits>,
    /// The action rules of a model that generates or follows actions; `None` (most models)
    /// refuses the action tasks. Left off the wire when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<ActionLimits>,
    /// The reference pictures an editing model takes (`i2i`); `None` (most models) takes
    /// none. Left off the wire when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub references: Option<ReferenceLimits>,
    /// Most solver steps a request may ask for.
    pub max_steps: u32,
    /// Values for the parameters a request leaves out.
    pub defaults: Defaults,
}

impl ModelLimits {
    /// Wan-like limits (64×64, 17 frames, 20 UniPC steps, guidance 4) for tests and examples.
    pub fn example() -> Self {
        ModelLimits {
            family: "Wan".into(),
            tasks: vec![TaskType::T2v, TaskType::T2i],
            image_roles: first_frame_only(),
            video: Some(VideoLimits { frame_multiple: 4, max_frames: 125 }),
            picture: Some(PictureLimits { spatial_multiple: 16, max_side: 1024 }),
            audio: None,
            action: None,
            references: None,
            max_steps: 100,
            defaults: Defaults {
                steps: 20,
                guidance_scale: 4.0,
                shift: 3.0,
                height: 64,
                width: 64,
                num_frames: 17,
                fps: 8,
                sampler: SamplerKind::Unipc,
                negative_prompt: String::new(),
                timesteps: None,
                knobs: crate::KnobSchema::default(),
            },
        }
    }
}

/// A request checked against a model, with every parameter concrete.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResolvedRequest {
    /// The request's id, unchanged.
    pub request_id: String,
    /// The declared task, one the model supports.
    pub task: TaskType,
    /// The prompt text parts joined by a space; never blank.
    pub prompt: String,
    /// `diffusion.negative_prompt`, else the negative text parts, else the model's default (may be
    /// empty).
    pub negative_prompt: String,
    /// The request gave a negative prompt (rather than the model's default): some pipelines
    /// (Qwen-Image's) run guidance only then.
    #[serde(default)]
    pub negative_given: bool,
    /// The request's seed, or the one `random_seed` supplied.
    pub seed: u64,
    /// The solver to run.
    pub sampler: SamplerKind,
    /// `flow_sde`'s noise scale `a` (0 for the other samplers).
    #[serde(default)]
    pub noise_level: f32,
    /// `flow_sde`'s stochastic steps, sorted, each below `steps` (empty for the other samplers).
    #[serde(default)]
    pub sde_steps: Vec<u32>,
    /// Solver steps, in `1..=max_steps`.
    pub steps: u32,
    /// An explicit schedule's base noise levels (one per step, descending in `(0, 1]`, before
    /// the shift), from `diffusion.timesteps`/`sigmas` or the model's list; `None`: the
    /// sampler's own spacing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<Vec<f64>>,
    /// Classifier-free guidance scale, in `0..=100`; above 1 the unconditional branch runs.
    pub guidance_scale: f32,
    /// Flow-matching timestep shift, in `(0, 100]`.
    pub shift: f32,
    /// Output height in pixels: a positive multiple of `spatial_multiple`, at most `max_side`;
    /// 0 for a model that makes no pictures.
    pub height: u32,
    /// Output width in pixels, as `height`.
    pub width: u32,
    /// Frames, `frame_multiple * k + 1` and at most `max_frames`; 1 for `t2i` and for a model
    /// that makes pictures but no video, 0 for one that makes neither.
    pub num_frames: u32,
    /// Frames per second, in `1..=240`.
    pub fps: u32,
    /// What to return and stream, as requested.
    pub outputs: OutputSpec,
    /// Make the clip's sound: `outputs.generate_sound`, else whether the model makes any; never
    /// true for a model without sound. A family that makes sound returns an `audio` artifact
    /// exactly when this is set.
    #[serde(default)]
    pub generate_sound: bool,
    /// Per-node overrides, as requested.
    pub node_params: BTreeMap<String, serde_json::Value>,
    /// Per-plugin parameters, as requested.
    pub plugin_params: BTreeMap<String, serde_json::Value>,
    /// Exact mode, as requested (see [`OmniRequest::exact`]).
    pub exact: bool,
    /// Scheduling priority, as requested; higher runs first.
    pub priority: i32,
    /// Conditioning pictures (`i2v`), decoded and checked by `resolve`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<InputImage>,
    /// Pictures placed at frames with a strength (`keyframe` inputs), decoded and checked.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keyframes: Vec<crate::Keyframe>,
    /// The input video (`v2v`), decoded and checked by `resolve`, cut to `num_frames`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub video: Option<InputVideo>,
    /// The initial noise the request supplies (a `latent` input): the starting latents for text
    /// and image to video (diffusers' `latents=`), the noise added to the encoded video for
    /// video to video. Seeded noise when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_noise: Option<LatentInput>,
    /// Other named latent inputs (Cosmos3: `sound_latents`, `action_latents`); the model's
    /// loop refuses names it does not denoise.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub named_noise: BTreeMap<String, LatentInput>,
    /// The checked action condition of an action task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<ResolvedAction>,
    /// `v2v`: the part of the schedule run on the noised input, in `(0, 1]`; 1 otherwise.
    #[serde(default = "full_strength")]
    pub strength: f64,
    /// How image and video inputs are fitted to the output size.
    #[serde(default)]
    pub resize_mode: crate::ResizeMode,
    /// The adapters to run with, checked one by one (names against the deploy at admission).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lora: Vec<crate::LoraUse>,
    /// The model's own knobs, concrete: every one the request gave or the model defaults, by
    /// name, checked against the model's [`KnobSchema`](crate::KnobSchema). The family's code
    /// reads them (Wan 2.2: `boundary_ratio`, `guidance_scale_2`, `switch_step`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub knobs: BTreeMap<String, serde_json::Value>,
    /// A knob that is a guidance scale of its own ([`KnobKind::GuidanceScale`](crate::KnobKind),
    /// Wan 2.2's `guidance_scale_2`) is above 1: the unconditional branch runs for it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub knob_cfg: bool,
    /// A partial schedule: steps `start..end` of the `steps`-step schedule, from the request's
    /// latents as they are when `start > 0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial: Option<PartialSchedule>,
    /// `diffusion.precision` as given (checked against the server's preset at admission).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<String>,
    /// Run the model's prompt extender before the text encoder ([`OmniRequest::prompt_extend`]).
    #[serde(default)]
    pub prompt_extend: bool,
}

/// Steps `start..end` of a request's schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartialSchedule {
    /// The first step run.
    pub start: u32,
    /// The loop stops before this step.
    pub end: u32,
}

impl ResolvedRequest {
    /// The first solver step that runs: 0, or for `v2v` the step from which `strength` of the
    /// schedule remains (diffusers' `get_timesteps`: `steps - min(floor(steps * strength), steps)`).
    pub fn start_step(&self) -> u32 {
        if let Some(p) = self.partial {
            return p.start;
        }
        let run = ((self.steps as f64 * self.strength) as u32).min(self.steps);
        self.steps - run
    }

    /// The conditioning picture in `role`, if the request has one.
    pub fn image(&self, role: crate::ImageRole) -> Option<&InputImage> {
        self.images.iter().find(|i| i.role == role)
    }

    /// Whether the unconditional branch runs (guidance above 1, or a knob that is a guidance
    /// scale above 1: either expert of a two-expert model).
    pub fn does_cfg(&self) -> bool {
        self.guidance_scale > 1.0 || self.knob_cfg
    }

    /// Knob `name` as a number, if the request has it (resolved: given, or the model's default).
    pub fn knob_f64(&self, name: &str) -> Option<f64> {
        self.knobs.get(name).and_then(serde_json::Value::as_f64)
    }

    /// Knob `name` as a whole number (a step index), if the request has it and it is one.
    pub fn knob_u32(&self, name: &str) -> Option<u32> {
        self.knobs.get(name).and_then(serde_json::Value::as_u64).and_then(|v| u32::try_from(v).ok())
    }
}

impl OmniRequest {
    /// Checks the request against `limits` and fills defaults. `random_seed` supplies the seed when
    /// the request has none (so callers control where randomness comes from).
    pub fn resolve(
        &self,
        limits: &ModelLimits,
        random_seed: impl FnOnce() -> u64,
    ) -> Result<ResolvedRequest, RequestError> {
        if self.request_id.trim().is_empty() {
            return Err(RequestError::new("request_id", "must not be empty"));
        }
        if !limits.tasks.contains(&self.task) {
            let supported: Vec<&str> = limits.tasks.iter().map(|t| t.as_str()).collect();
            return Err(RequestError::new(
                "task",
                format!(
                    "{} does not support `{}` (supported: {})",
                    limits.family,
                    self.task.as_str(),
                    supported.join(", ")
                ),
            ));
        }
        limits.check_video_task(self.task)?;
        for (i, part) in self.inputs.iter().enumerate() {
            let conditioning = !matches!(part, InputPart::Text { .. } | InputPart::Latent { .. });
            if conditioning && matches!(self.task, TaskType::T2v | TaskType::T2i) {
                return Err(RequestError::new(
                    format!("inputs[{i}]"),
                    format!("`{}` takes only text inputs", self.task.as_str()),
                ));
            }
        }
        let images = self.decode_images(&limits.image_roles)?;
        if self.task == TaskType::I2i {
            self.check_references(limits, &images)?;
        }
        let mut named_noise = self.latent_inputs()?;
        let initial_noise = named_noise.remove("latents");
        let mut video = self.decode_video()?;
        let strength = match (self.task, self.diffusion.strength) {
            (TaskType::V2v, s) => {
                let s = s.unwrap_or(DEFAULT_STRENGTH);
                if !(s > 0.0 && s <= 1.0) {
                    return Err(RequestError::new("diffusion.strength", format!("{s} must be in (0, 1]")));
                }
                s
            }
            (_, None) => 1.0,
            (task, Some(_)) => {
                return Err(RequestError::new(
                    "diffusion.strength",
                    format!("applies to `v2v` only, not `{}`", task.as_str()),
                ))
            }
        };
        if self.diffusion.resize_mode.is_some() && !matches!(self.task, TaskType::I2v | TaskType::V2v) {
            return Err(RequestError::new(
                "diffusion.resize_mode",
                format!("applies to image and video inputs (`i2v`, `v2v`), not `{}`", self.task.as_str()),
            ));
        }
        let prompt = self.prompt().unwrap_or_default();
        if prompt.trim().is_empty() {
            return Err(RequestError::new("prompt", "must not be empty for text-to-video"));
        }
        let d = &self.diffusion;
        let def = &limits.defaults;
        let (steps, schedule) = schedule::resolve(d, def, limits.max_steps)?;
        let guidance_scale = d.guidance_scale.unwrap_or(def.guidance_scale);
        if !guidance_scale.is_finite() || !(0.0..=100.0).contains(&guidance_scale) {
            return Err(RequestError::new("diffusion.guidance_scale", format!("{guidance_scale} is outside 0..=100")));
        }
        let shift = d.shift.unwrap_or(def.shift);
        let core = crate::knobs::Resolved { guidance_scale, shift, steps };
        let knobs = def.knobs.resolve(&d.knobs, &core, &limits.family)?;
        bindings::check(&self.lora, &def.knobs, &limits.family)?;
        if !shift.is_finite() || shift <= 0.0 || shift > 100.0 {
            return Err(RequestError::new("diffusion.shift", format!("{shift} must be in (0, 100]")));
        }
        let action = match (is_action_task(self.task), &limits.action) {
            (true, Some(rules)) => {
                for (name, given) in [
                    ("diffusion.height", d.height),
                    ("diffusion.width", d.width),
                    ("diffusion.num_frames", d.num_frames),
                ] {
                    if given.is_some() {
                        return Err(RequestError::new(
                            name,
                            format!(
                                "`{}` sets it from diffusion.action (the tier's canvas, chunk_size + 1 frames)",
                                self.task.as_str()
                            ),
                        ));
                    }
                }
                let image = images.iter().find(|i| i.role == crate::ImageRole::FirstFrame);
                Some(rules.resolve(self.task, d.action.as_ref(), image, video.as_ref())?)
            }
            (true, None) => return Err(RequestError::new("task", format!("{} takes no actions", limits.family))),
            (false, _) if d.action.is_some() => {
                return Err(RequestError::new(
                    "diffusion.action",
                    format!("applies to the action tasks, not `{}`", self.task.as_str()),
                ))
            }
            (false, _) => None,
        };
        let (height, width) = match &action {
            Some((_, canvas)) => *canvas,
            None => limits.resolve_size(&self.edit_size(limits, &images))?,
        };
        if action.is_some() || self.task == TaskType::I2i {
            // The action path fits pictures to the canvas itself; an edit's references keep
            // their own sizes.
        } else if limits.picture.is_some() {
            self.check_fits(&images, video.as_ref(), width, height)?;
        } else if let Some(i) =
            self.inputs.iter().position(|p| matches!(p, InputPart::Image { .. } | InputPart::Video { .. }))
        {
            return Err(RequestError::new(format!("inputs[{i}]"), format!("{} takes no pictures", limits.family)));
        }
        let num_frames = match &action {
            Some((a, _)) => a.chunk_size + 1,
            None => limits.resolve_frames(d, self.task, video.as_ref())?,
        };
        // Video to video keeps the input's timing (output frame i is input frame i) unless the
        // request sets a rate.
        let fps = match (d.fps, &video) {
            (Some(fps), _) => fps,
            (None, Some(v)) if v.fps >= 0.5 => (v.fps.round() as u32).min(240),
            (None, _) => def.fps,
        };
        if fps == 0 || fps > 240 {
            return Err(RequestError::new("diffusion.fps", format!("{fps} is outside 1..=240")));
        }
        if self.outputs.modalities.is_empty() {
            return Err(RequestError::new("outputs.modalities", "must name at least one modality"));
        }
        if self.outputs.preview_every == Some(0) {
            return Err(RequestError::new("outputs.preview_every", "must be at least 1 (a preview every N steps)"));
        }
        let generate_sound =
            audio::resolve_sound(self.outputs.generate_sound, limits.audio.as_ref(), self.task, &limits.family)?;
        let sampler = self.sampling.sampler.unwrap_or(def.sampler);
        let schedule = schedule::for_sampler(sampler, schedule, steps, d, self.sampling.sigma_max)?;
        let (noise_level, sde_steps) = self.sampling.resolve_sde(sampler, steps)?;
        let partial = partial_schedule(d.start_step, d.end_step, steps, self.task, initial_noise.is_some())?;
        if (steps as f64 * strength) < 1.0 {
            return Err(RequestError::new(
                "diffusion.strength",
                format!("{strength} of {steps} steps runs no step (give at least 1/{steps})"),
            ));
        }
        let keyframes = self.resolve_keyframes(limits, num_frames, &images)?;
        if let Some(v) = video.as_mut().filter(|v| v.frames > num_frames) {
            v.rgb.truncate((num_frames * v.height * v.width * 3) as usize);
            v.frames = num_frames;
        }
        Ok(ResolvedRequest {
            request_id: self.request_id.clone(),
            task: self.task,
            prompt,
            negative_prompt: self.negative_prompt().unwrap_or_else(|| def.negative_prompt.clone()),
            negative_given: self.negative_prompt().is_some(),
            seed: self.sampling.seed.unwrap_or_else(random_seed),
            sampler,
            noise_level,
            sde_steps,
            steps,
            schedule,
            guidance_scale,
            shift,
            height,
            width,
            num_frames,
            fps,
            outputs: self.outputs.clone(),
            generate_sound,
            node_params: self.node_params.clone(),
            plugin_params: self.plugin_params.clone(),
            exact: self.exact,
            priority: self.priority,
            images,
            keyframes,
            video,
            strength,
            resize_mode: self.diffusion.resize_mode.unwrap_or_default(),
            initial_noise,
            named_noise,
            action: action.map(|(a, _)| a),
            lora: crate::resolve_lora(&self.lora)?,
            knobs: knobs.values,
            knob_cfg: knobs.cfg,
            partial,
            precision: d.precision.clone(),
            prompt_extend: self.prompt_extend,
        })
    }
}

impl OmniRequest {
    /// Every picture and the video's frames fitted to the output (`resize_mode`) within
    /// [`crate::check_fit`]'s bounds, so an input's shape cannot make the job's work or memory
    /// explode after admission. `images` and `video` are this request's, decoded in input order.
    fn check_fits(
        &self,
        images: &[InputImage],
        video: Option<&InputVideo>,
        width: u32,
        height: u32,
    ) -> Result<(), RequestError> {
        let mode = self.diffusion.resize_mode.unwrap_or_default();
        let sizes = images.iter().map(|i| (i.width, i.height)).chain(video.map(|v| (v.width, v.height)));
        let media = self.inputs.iter().enumerate().filter(|(_, p)| matches!(p, InputPart::Image { .. }));
        let media = media.chain(self.inputs.iter().enumerate().filter(|(_, p)| matches!(p, InputPart::Video { .. })));
        for ((w, h), (i, _)) in sizes.zip(media) {
            crate::check_fit(w, h, width, height, mode).map_err(|m| RequestError::new(format!("inputs[{i}]"), m))?;
        }
        Ok(())
    }
}

/// The request's `start_step`/`end_step` checked against its schedule: `None` for the whole of it.
fn partial_schedule(
    start: Option<u32>,
    end: Option<u32>,
    steps: u32,
    task: TaskType,
    has_latents: bool,
) -> Result<Option<PartialSchedule>, RequestError> {
    if start.is_none() && end.is_none() {
        return Ok(None);
    }
    let field = if start.is_some() { "diffusion.start_step" } else { "diffusion.end_step" };
    if task == TaskType::V2v {
        return Err(RequestError::new(field, "does not apply to `v2v` (its `strength` says where to start)"));
    }
    let (start, end) = (start.unwrap_or(0), end.unwrap_or(steps));
    if end > steps || end == 0 {
        return Err(RequestError::new("diffusion.end_step", format!("{end} is outside 1..={steps}")));
    }
    if start >= end {
        return Err(RequestError::new("diffusion.start_step", format!("{start} must be below the end, {end}")));
    }
    if start > 0 && !has_latents {
        return Err(RequestError::new(
            "diffusion.start_step",
            "starting mid-schedule needs the latents to start from (a `latent` input)",
        ));
    }
    Ok(Some(PartialSchedule { start, end }))
}

/// Flow-GRPO's SDE noise scale, used when a `flow_sde` request gives none.
pub const DEFAULT_NOISE_LEVEL: f32 = 0.7;

impl crate::SamplingParams {
    /// `(noise_level, sde_steps)` for `sampler`: the SDE fields are refused, naming them, for
    /// any other sampler, and checked against the step count for `flow_sde`.
    fn resolve_sde(&self, sampler: SamplerKind, steps: u32) -> Result<(f32, Vec<u32>), RequestError> {
        if sampler != SamplerKind::FlowSde {
            for (field, given) in
                [("sampling.noise_level", self.noise_level.is_some()), ("sampling.sde_steps", self.sde_steps.is_some())]
            {
                if given {
                    return Err(RequestError::new(
                        field,
                        format!("only applies to sampler `flow_sde` (this request uses `{}`)", sampler.as_str()),
                    ));
                }
            }
            return Ok((0.0, Vec::new()));
        }
        let a = self.noise_level.unwrap_or(DEFAULT_NOISE_LEVEL);
        if !a.is_finite() || a <= 0.0 || a > 5.0 {
            return Err(RequestError::new("sampling.noise_level", format!("{a} must be in (0, 5]")));
        }
        let mut chosen = match &self.sde_steps {
            Some(s) => s.clone(),
            None => (0..steps).collect(),
        };
        chosen.sort_unstable();
        chosen.dedup();
        if let Some(bad) = chosen.iter().find(|&&i| i >= steps) {
            return Err(RequestError::new(
                "sampling.sde_steps",
                format!("step {bad} is past the last of {steps} steps (steps count from 0)"),
            ));
        }
        Ok((a, chosen))
    }
}

#[cfg(test)]
mod references_tests;
#[cfg(test)]
mod tests;
