//! LTX-2's audio-video workflows: one latent that packs video and audio (`LTXVConcatAVLatent`)
//! denoised by a `SamplerCustomAdvanced` on ManualSigmas, split again (`LTXVSeparateAVLatent`)
//! for the VAE decode and the audio VAE decode. Two such samplers with the latent upsampler
//! between them (the base at half size, then a short refine schedule) are the two-stage recipe:
//! one request whose `node_params` carry each loop's noise levels as given. ComfyUI's
//! `CFGGuider` is plain classifier-free guidance on both streams with one scale, so the request
//! turns the pipeline's other guidance (STG, modality guidance, rescale) off.

use serde_json::{json, Map, Value};

use fastvideo_request::{LoraExpert, SamplerKind, TaskType};

use super::{number, push_file, text, Lowering, ModelFile, RunPlan};
use crate::translate::GraphNode;
use crate::CompileError;

/// One sampler of the graph: its seed, guidance scale and noise levels (the final 0 dropped).
struct Pass<'a> {
    guider: &'a GraphNode,
    /// Its `KSamplerSelect` and the solver it names.
    select: &'a GraphNode,
    kind: SamplerKind,
    seed: u64,
    cfg: f64,
    sigmas: Vec<f64>,
    /// Its `LTXVConcatAVLatent`.
    latent: &'a GraphNode,
}

impl<'a> Lowering<'a> {
    /// The sampler of an `LTXVSeparateAVLatent` `sep`, read as a pass.
    fn pass(&self, sampler: &'a GraphNode) -> Result<Pass<'a>, CompileError> {
        let (noise, _) = self.expect(sampler, "noise", &["noise.random"])?;
        let (guider, _) = self.expect(sampler, "guider", &["guider.cfg"])?;
        let (select, _) = self.expect(sampler, "sampler", &["sampler.select"])?;
        let (sched, _) = self.expect(sampler, "sigmas", &["schedule.manual", "schedule.ltxv"])?;
        let (latent, _) = self.expect(sampler, "latent", &["latent.av_concat"])?;
        let name = text(select, "sampler")?;
        let kind = match name.as_str() {
            "euler" => SamplerKind::Euler,
            "euler_ancestral" => SamplerKind::EulerAncestral,
            "gradient_estimation" => SamplerKind::GradientEstimation,
            _ => {
                let msg = format!(
                    "sampler `{name}`: LTX-2's loops step with `euler`, `euler_ancestral` or `gradient_estimation`"
                );
                return Err(CompileError::node(&select.origin, msg));
            }
        };
        let seed = noise.params.get("seed").and_then(Value::as_u64);
        let seed = seed.ok_or_else(|| CompileError::node(&noise.origin, "`seed` must be a whole number ≥ 0"))?;
        let sigmas = match sched.stage.as_str() {
            "schedule.ltxv" => self.ltxv_sigmas(sched)?,
            _ => manual_sigmas(sched)?,
        };
        Ok(Pass { guider, select, kind, seed, cfg: number(guider, "cfg")?, sigmas, latent })
    }

    /// `LTXVScheduler`'s levels (the final 0 dropped): `steps` levels from 1, shifted by
    /// `exp(k) / (exp(k) + 1/σ − 1)` with `k` linear in the latent's token count (4096 without a
    /// latent) between `base_shift` at 1024 and `max_shift` at 4096, then stretched so the last
    /// level is `terminal` — ComfyUI's arithmetic, in float32 as it computes it.
    fn ltxv_sigmas(&self, n: &GraphNode) -> Result<Vec<f64>, CompileError> {
        let steps = whole(n, "steps")?;
        if steps == 0 {
            return Err(CompileError::node(&n.origin, "`steps` must be at least 1"));
        }
        let tokens = match self.input(n, "latent") {
            None => 4096.0,
            Some(_) => {
                let (concat, _) = self.expect(n, "latent", &["latent.av_concat", "latent.empty"])?;
                let (empty, _) = match concat.stage.as_str() {
                    "latent.empty" => (concat, 0),
                    _ => self.through_inplace(self.need(concat, "video")?)?,
                };
                if empty.stage != "latent.empty" {
                    let msg = format!(
                        "its latent's video comes from node {} (`{}`), not an empty latent",
                        empty.origin, empty.stage
                    );
                    return Err(CompileError::node(&n.origin, msg));
                }
                let f = (whole(empty, "frames")?.max(1) - 1) / 8 + 1;
                (f * (whole(empty, "height")? / 32) * (whole(empty, "width")? / 32)) as f64
            }
        };
        let (max, base) = (number(n, "max_shift")?, number(n, "base_shift")?);
        let stretch = n.params.get("stretch").and_then(Value::as_bool).unwrap_or(true);
        let terminal = number(n, "terminal")?;
        let mm = (max - base) / (4096.0 - 1024.0);
        let k = (tokens * mm + base - mm * 1024.0) as f32;
        let e = k.exp();
        let mut levels: Vec<f32> =
            (0..steps).map(|i| 1.0 - i as f32 / steps as f32).map(|s| e / (e + (1.0 / s - 1.0))).collect();
        if stretch {
            let last = 1.0 - *levels.last().expect("steps ≥ 1");
            let scale = last / (1.0 - terminal as f32);
            levels.iter_mut().for_each(|s| *s = 1.0 - (1.0 - *s) / scale);
        }
        Ok(levels.into_iter().map(f64::from).collect())
    }

    /// A video latent through `LTXVImgToVideoInplace` nodes that are bypassed (a picture
    /// written into the latent in place is not run yet).
    fn through_inplace(&self, mut n: (&'a GraphNode, usize)) -> Result<(&'a GraphNode, usize), CompileError> {
        while n.0.stage == "latent.image_inplace" {
            if n.0.params.get("bypass").and_then(Value::as_bool) != Some(true) {
                let msg = "a picture written into the latent in place (LTXVImgToVideoInplace without `bypass`) is not \
                           run yet; set bypass";
                return Err(CompileError::node(&n.0.origin, msg));
            }
            n = self.need(n.0, "latent")?;
        }
        Ok(n)
    }

    /// `CreateVideo` `video`'s sound: the audio VAE decode of the audio half of `sampler`'s
    /// latent.
    pub(super) fn audio_of(&self, video: &GraphNode, sampler: &GraphNode) -> Result<&'a GraphNode, CompileError> {
        let (decode, _) = self.expect(video, "audio", &["decode.audio"])?;
        if !std::ptr::eq(self.separated(decode, "latent", 1)?, sampler) {
            let msg = format!("decodes another sampler's sound than the video's (node {})", sampler.origin);
            return Err(CompileError::node(&decode.origin, msg));
        }
        Ok(decode)
    }

    /// Output `k` of an `LTXVSeparateAVLatent` (`expect_k`) and the sampler it separates.
    pub(super) fn separated(&self, n: &GraphNode, param: &str, expect_k: usize) -> Result<&'a GraphNode, CompileError> {
        // Through `LTXVCropGuides`' latent, which passes a latent without keyframe guides on.
        let (mut from, mut param) = (n, param);
        while let Some((crop, 2)) = self.input(from, param).filter(|(p, _)| p.stage == "condition.crop_guides") {
            (from, param) = (crop, "latent");
        }
        let (sep, k) = self.expect(from, param, &["latent.av_separate"])?;
        if k != expect_k {
            let which = ["video", "audio"][expect_k];
            let msg =
                format!("`{param}` takes node {}'s output {k}; the {which} latent is output {expect_k}", sep.origin);
            return Err(CompileError::node(&n.origin, msg));
        }
        Ok(self.expect(sep, "latent", &["sample.custom"])?.0)
    }

    /// The run of the LTX-2 graph whose last sampler is `last`, decoded by the VAE `vae`.
    pub(super) fn av_run(
        &self,
        last: &'a GraphNode,
        vae: &GraphNode,
        audio: Option<&GraphNode>,
        video_create: &GraphNode,
    ) -> Result<RunPlan, CompileError> {
        let mut files = Vec::new();
        push_file(&mut files, self.file(vae, "vae")?);
        let last_pass = self.pass(last)?;
        let video = self.through_inplace(self.need(last_pass.latent, "video")?)?;
        let (base, refine) = match video.0.stage.as_str() {
            "latent.upsample" => {
                let up = video.0;
                let first = self.separated(up, "latent", 0)?;
                let (loader, _) = self.expect(up, "upscale_model", &["load.upscale_model"])?;
                push_file(&mut files, self.file(loader, "upscale_model")?);
                self.vae(up, "vae", &mut files)?;
                if !std::ptr::eq(self.separated(last_pass.latent, "audio", 1)?, first) {
                    let msg =
                        format!("its audio latent is not node {}'s: the refine carries the base's sound", first.origin);
                    return Err(CompileError::node(&last_pass.latent.origin, msg));
                }
                (self.pass(first)?, Some(last_pass))
            }
            "latent.empty" => (last_pass, None),
            other => {
                let msg = format!(
                    "its video latent comes from node {} (`{other}`); this runtime starts from EmptyLTXVLatentVideo, or \
                     from the latent upsampler of another sampler's video (two stages)",
                    video.0.origin
                );
                return Err(CompileError::node(&last_pass.latent.origin, msg));
            }
        };
        let (empty, _) = self.through_inplace(self.need(base.latent, "video")?)?;
        if empty.stage != "latent.empty" {
            let msg =
                format!("its video latent comes from node {} (`{}`), not an empty latent", empty.origin, empty.stage);
            return Err(CompileError::node(&base.latent.origin, msg));
        }
        let (empty_audio, _) = self.expect(base.latent, "audio", &["latent.empty_audio"])?;
        let (audio_vae, _) = self.expect(empty_audio, "audio_vae", &["load.audio_vae"])?;
        push_file(&mut files, self.file(audio_vae, "audio_vae")?);
        if let Some(decode) = audio {
            let (loader, _) = self.expect(decode, "audio_vae", &["load.audio_vae"])?;
            push_file(&mut files, self.file(loader, "audio_vae")?);
        }

        let (mut shift, mut loras) = (None, Vec::new());
        self.model(base.guider, "model", &mut files, &mut shift, &mut loras)?;
        let mut refs = Vec::new();
        let (prompt, _) = self.conditioning(base.guider, "positive", &mut files, &mut refs)?;
        let (negative, _) = self.conditioning(base.guider, "negative", &mut files, &mut refs)?;
        if let Some(r) = refs.first() {
            let msg = format!("conditions on node {}'s picture: LTX-2 workflows run text to video here", r.node);
            return Err(CompileError::node(&base.guider.origin, msg));
        }
        // The sound's length is the audio latent's own (its frame count at its rate), which
        // ComfyUI's templates make a little longer than the video's 8k+1 frames.
        let (audio_frames, audio_fps) = (whole(empty_audio, "frames")?, number(empty_audio, "fps")?);
        if audio_fps <= 0.0 {
            return Err(CompileError::node(&empty_audio.origin, "`frame_rate` must be above 0"));
        }
        let fps = frame_rate(self, base.guider);
        for (n, rate) in
            [(video_create, video_create.params.get("fps").and_then(Value::as_f64)), (empty_audio, Some(audio_fps))]
        {
            if let (Some(a), Some(b)) = (fps, rate) {
                if (a as f64 - b).abs() > 1e-6 {
                    let msg = format!(
                        "frame rate {b} differs from LTXVConditioning's {a}: the model places video and sound in time \
                         by one rate"
                    );
                    return Err(CompileError::node(&n.origin, msg));
                }
            }
        }
        let mut node_params = Map::new();
        node_params.insert(
            "denoise".into(),
            json!({ "sigmas": base.sigmas, "audio_seconds": audio_frames as f64 / audio_fps }),
        );
        if let Some(r) = &refine {
            self.same_model_and_prompt(&base, r, &mut loras, (&prompt, &negative))?;
            if r.kind != base.kind {
                let msg =
                    format!("its sampler differs from node {}'s: one request runs one solver", base.select.origin);
                return Err(CompileError::node(&r.select.origin, msg));
            }
            node_params.insert(
                "refine".into(),
                json!({ "sigmas": r.sigmas, "guidance_scale": r.cfg, "audio_guidance_scale": r.cfg, "seed": r.seed }),
            );
        }
        let (w, h) = (whole(empty, "width")? as u32, whole(empty, "height")? as u32);
        let length = whole(empty, "frames")?;
        let scale = if refine.is_some() { 2 } else { 1 };
        let cfg = base.cfg as f32;
        // ComfyUI's CFGGuider: one scale on both streams, no other guidance.
        let knobs = json!({
            "audio_guidance_scale": cfg, "stg_scale": 0.0, "audio_stg_scale": 0.0, "modality_scale": 1.0,
            "audio_modality_scale": 1.0, "guidance_rescale": 0.0, "audio_guidance_rescale": 0.0,
        });
        Ok(RunPlan {
            sampler_node: last.origin.clone(),
            latent_node: empty.origin.clone(),
            size_node: empty.origin.clone(),
            task: TaskType::T2v,
            files,
            prompt: prompt.unwrap_or_default(),
            negative,
            seed: base.seed,
            steps: base.sigmas.len() as u32,
            strength: None,
            cfg,
            sampler: base.kind,
            shift: None,
            loras,
            // The latent's cells (32 pixels, 8 frames after the first), as EmptyLTXVLatentVideo
            // allots them; two stages end at twice the size.
            width: Some(w / 32 * 32 * scale),
            height: Some(h / 32 * 32 * scale),
            frames: Some(((length.max(1) - 1) / 8 * 8 + 1) as u32),
            fps,
            fps_node: None,
            fps_from_video: false,
            images: Vec::new(),
            size_from: None,
            video: None,
            outputs: Vec::new(),
            switch_step: None,
            cfg_2: None,
            node_params,
            knobs: knobs.as_object().cloned().unwrap_or_default(),
        })
    }

    /// A refine pass runs the base's model and prompt: one request serves both. LoRAs on one
    /// stage's model only bind to that loop (`base`, `refine`: the distilled LoRA the reference
    /// swaps in for stage two), those on both to both; `loras` (the base's) becomes the request's.
    fn same_model_and_prompt(
        &self,
        base: &Pass,
        refine: &Pass,
        loras: &mut Vec<super::LoraPlan>,
        prompts: (&Option<String>, &Option<String>),
    ) -> Result<(), CompileError> {
        let (mut files, mut shift, mut loras_2) = (Vec::<ModelFile>::new(), None, Vec::new());
        self.model(refine.guider, "model", &mut files, &mut shift, &mut loras_2)?;
        let (mut base_files, mut base_loras) = (Vec::<ModelFile>::new(), Vec::new());
        self.model(base.guider, "model", &mut base_files, &mut None, &mut base_loras)?;
        let file_of = |f: &[ModelFile]| f.first().map(|m| m.file.clone());
        if file_of(&files) != file_of(&base_files) {
            let msg = format!("its model is not node {}'s: both stages run one model here", base.guider.origin);
            return Err(CompileError::node(&refine.guider.origin, msg));
        }
        super::chain::bind_per_model(loras, loras_2, (LoraExpert::Base, LoraExpert::Refine));
        let mut refs = Vec::new();
        let p = self.conditioning(refine.guider, "positive", &mut files, &mut refs)?.0;
        let n = self.conditioning(refine.guider, "negative", &mut files, &mut refs)?.0;
        if (&p, &n) != prompts {
            let msg = format!("its prompt differs from node {}'s: both stages run one prompt", base.guider.origin);
            return Err(CompileError::node(&refine.guider.origin, msg));
        }
        Ok(())
    }
}

/// `LTXVConditioning`'s frame rate on the guider's positive conditioning, if it sets one.
fn frame_rate(l: &Lowering, guider: &GraphNode) -> Option<f32> {
    let mut n = l.input(guider, "positive")?.0;
    loop {
        match n.stage.as_str() {
            "condition.frame_rate" => return n.params.get("frame_rate").and_then(Value::as_f64).map(|f| f as f32),
            "condition.crop_guides" => n = l.input(n, "positive")?.0,
            _ => return None,
        }
    }
}

/// ManualSigmas' list (`"1.0, 0.99, …, 0.0"`): descending noise levels in (0, 1] ending at 0,
/// returned without the final 0.
fn manual_sigmas(n: &GraphNode) -> Result<Vec<f64>, CompileError> {
    let s = text(n, "sigmas")?;
    let err = |m: String| CompileError::node(&n.origin, m);
    // ComfyUI reads the numbers out of the text (`[-+]?\d*\.*\d+`) whatever separates them.
    let values: Vec<f64> = s
        .split(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '+' | '-')))
        .filter(|t| !t.is_empty())
        .map(|t| t.parse::<f64>().map_err(|_| err(format!("`sigmas`: `{t}` is not a number"))))
        .collect::<Result<_, _>>()?;
    let Some((&last, levels)) = values.split_last() else { return Err(err("`sigmas` is empty".into())) };
    if last != 0.0 {
        return Err(err(format!("`sigmas` ends at {last}: this runtime denoises to the end (a list ending at 0)")));
    }
    if levels.is_empty() || levels.iter().any(|&s| !(s > 0.0 && s <= 1.0)) || levels.windows(2).any(|w| w[1] >= w[0]) {
        return Err(err(format!("`sigmas` {s:?}: noise levels must descend in (0, 1] before the final 0")));
    }
    Ok(levels.to_vec())
}

/// `n`'s whole-number parameter `k` (a count or a size).
fn whole(n: &GraphNode, k: &str) -> Result<u64, CompileError> {
    let v = number(n, k)?;
    if v < 0.0 || v.fract() != 0.0 {
        return Err(CompileError::node(&n.origin, format!("`{k}` {v} must be a whole number ≥ 0")));
    }
    Ok(v as u64)
}
