//! What one sampler of a workflow runs as: a [`RunPlan`], and the engine request it becomes once
//! its input files are read.

use std::path::Path;

use serde::Serialize;

use fastvideo_request::{OmniRequest, SamplerKind, TaskType};

use crate::media::{ImagePlan, VideoPlan};
use crate::CompileError;

/// A model file a loader names, for the deploy's file → folder map.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelFile {
    /// The loader node.
    pub node: String,
    /// `diffusion_model`, `text_encoder`, `vae`, `clip_vision` or `checkpoint`.
    pub role: &'static str,
    /// The file name as the workflow gives it.
    pub file: String,
}

/// A LoRA a `LoraLoaderModelOnly`/`LoraLoader` applies to the model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoraPlan {
    /// The loader node.
    pub node: String,
    /// The file as the workflow names it (`lora_name`): the deploy's `[[adapters]]` entry of
    /// that file name or name serves it.
    pub file: String,
    /// `strength_model`.
    pub strength: f64,
    /// In a chain of two models: the one it loads on, when not both (`high_noise` for the first
    /// sampler's, `low_noise` for the second's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expert: Option<fastvideo_request::LoraExpert>,
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
    /// The video carries the sound the run makes (its `CreateVideo` takes LTX-2's decoded audio).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub audio: bool,
}

/// One sampler's run: everything a request needs, and the outputs it feeds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunPlan {
    /// The sampler node.
    pub sampler_node: String,
    /// The node making the sampler's latent: the empty latent, the image-to-video node
    /// (`WanImageToVideo`, …) or the `VAEEncode` of a video.
    pub latent_node: String,
    /// The node setting width, height and frames: the latent node, or for video to video the
    /// last resize of the video (else its loader).
    pub size_node: String,
    /// Text to video or image, image to video, or video to video.
    pub task: TaskType,
    /// The model files its loaders name.
    pub files: Vec<ModelFile>,
    /// Prompt and negative prompt.
    pub prompt: String,
    /// `None` when no negative conditioning is connected (or it is zeroed out); an empty
    /// prompt connected is `Some("")`, which guides away from the empty prompt as ComfyUI does.
    pub negative: Option<String>,
    /// Seed, steps, guidance scale, solver.
    pub seed: u64,
    /// Solver steps of the whole schedule; video to video runs the `strength` part of it.
    pub steps: u32,
    /// Video to video: the part of the schedule that runs (ComfyUI's `denoise`, or a
    /// `KSamplerAdvanced` starting mid-schedule), in `(0, 1]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strength: Option<f64>,
    /// Classifier-free guidance scale.
    pub cfg: f32,
    /// The solver.
    pub sampler: SamplerKind,
    /// The flow shift a `ModelSamplingSD3` sets; the model's default when none.
    pub shift: Option<f32>,
    /// LoRAs applied to the model, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub loras: Vec<LoraPlan>,
    /// Output size; for video to video without a resize, the input video's.
    pub width: Option<u32>,
    /// Output size, as `width`.
    pub height: Option<u32>,
    /// Frames (1 for an image); for video to video, every usable frame of the input.
    pub frames: Option<u32>,
    /// Frame rate of the video output, if one sets it.
    pub fps: Option<f32>,
    /// The node setting it (`CreateVideo`).
    pub fps_node: Option<String>,
    /// The frame rate is the input video's (`CreateVideo` fed by `GetVideoComponents`' fps).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub fps_from_video: bool,
    /// Image to video: the first (and last) frame; an edit: the references.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ImagePlan>,
    /// An edit sized by one of its references (the `VAEEncode` of it, or `GetImageSize`): its
    /// index in `images`. The size is that picture's once read, each side rounded down to a
    /// multiple of 16, as the VAE encoding crops it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size_from: Option<usize>,
    /// Video to video: the input video.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub video: Option<VideoPlan>,
    /// The output nodes this run feeds.
    pub outputs: Vec<OutputPlan>,
    /// Two chained samplers on two models (Wan 2.2's high- and low-noise): the step the second
    /// model takes over at, and its guidance scale.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub switch_step: Option<u32>,
    /// The second model's guidance scale, as `switch_step`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cfg_2: Option<f32>,
    /// Parameters of the model's pipeline nodes (LTX-2: each loop's noise levels as given, the
    /// refine stage of two).
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    pub node_params: serde_json::Map<String, serde_json::Value>,
    /// The model's knobs the workflow sets (LTX-2: the audio's guidance scale, the other
    /// guidance off as ComfyUI's `CFGGuider` runs it).
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    pub knobs: serde_json::Map<String, serde_json::Value>,
}

impl RunPlan {
    /// The node a request field (`diffusion.width`, as a request error names it) came from,
    /// so an error can name it: size and frames from the size node, the task from the latent
    /// node (which made it image or video to video), the rest the sampler.
    pub fn node_of(&self, field: &str) -> &str {
        match field {
            "diffusion.width" | "diffusion.height" | "diffusion.num_frames" => &self.size_node,
            "diffusion.fps" => self.fps_node.as_deref().unwrap_or(&self.sampler_node),
            "task" => &self.latent_node,
            f if f.starts_with("lora") => self.lora_node(f).unwrap_or(&self.sampler_node),
            f if f.starts_with("inputs") => &self.latent_node,
            _ => &self.sampler_node,
        }
    }

    /// The LoRA loader behind a `lora[i]…` field.
    fn lora_node(&self, field: &str) -> Option<&str> {
        let i: usize = field.strip_prefix("lora[")?.split(']').next()?.parse().ok()?;
        self.loras.get(i).map(|l| l.node.as_str())
    }

    /// The request for this run. Its pictures and video are read from the ComfyUI input
    /// folder `inputs` now (checked, resized, carried in the request), so a missing or bad
    /// file is refused naming its loader before anything is queued.
    pub fn request(&self, request_id: &str, inputs: &Path) -> Result<OmniRequest, CompileError> {
        let mut r = OmniRequest::text_to_video(request_id, self.prompt.clone());
        r.task = self.task;
        r.sampling.seed = Some(self.seed);
        r.sampling.sampler = Some(self.sampler);
        let mut sized = None;
        for (i, image) in self.images.iter().enumerate() {
            let (part, (w, h)) = image.load_sized(inputs)?;
            if self.size_from == Some(i) {
                sized = Some((w - w % 16, h - h % 16));
            }
            r.inputs.push(part);
        }
        let d = &mut r.diffusion;
        d.num_inference_steps = Some(self.steps);
        d.strength = self.strength;
        d.guidance_scale = Some(self.cfg);
        // Wan 2.2's expert knobs, which the model's knob schema checks.
        d.set_knob("switch_step", self.switch_step);
        d.set_knob("guidance_scale_2", self.cfg_2.map(fastvideo_request::number_f32));
        for (k, v) in &self.knobs {
            d.set_knob(k, Some(v.clone()));
        }
        r.node_params.extend(self.node_params.iter().map(|(k, v)| (k.clone(), v.clone())));
        d.shift = self.shift;
        d.width = self.width.or(sized.map(|s| s.0));
        d.height = self.height.or(sized.map(|s| s.1));
        d.num_frames = self.frames;
        d.fps = self.fps.map(|f| f.round().max(1.0) as u32);
        d.negative_prompt = self.negative.clone();
        r.lora = self
            .loras
            .iter()
            .map(|l| fastvideo_request::LoraChoice { name: l.file.clone(), scale: Some(l.strength), expert: l.expert })
            .collect();
        if let Some(video) = &self.video {
            let v = video.load(inputs)?;
            r.inputs.push(v.part);
            d.width = d.width.or(Some(v.width));
            d.height = d.height.or(Some(v.height));
            if self.fps_from_video && v.fps > 0.0 {
                d.fps = Some(v.fps.round().max(1.0) as u32);
            }
        }
        Ok(r)
    }
}
