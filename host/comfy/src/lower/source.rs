//! Where a sampler's latent comes from, which decides the task: an empty latent (text to video
//! or image), an image-to-video node (`WanImageToVideo`, `WanFirstLastFrameToVideo`, Wan 2.2's
//! latent with a start image: image to video), or the VAE encoding of a video (video to video).
//! Pictures and videos are followed back through resize nodes to the loader naming their file;
//! a CLIP vision embedding must be of the picture the video starts (or ends) from, since the
//! model encodes that picture itself.

use serde_json::Value;

use fastvideo_request::{ImageRole, TaskType};

use super::{number, push_file, text, Lowering, ModelFile, RunPlan};
use crate::media::{ImagePlan, VideoPlan};
use crate::resize::Resize;
use crate::translate::GraphNode;
use crate::CompileError;

/// A sampler's latent, by what makes it.
pub(super) enum Source<'a> {
    /// `latent.empty`: text to video (or image, without `frames`).
    Empty(&'a GraphNode),
    /// `condition.image_to_video` / `latent.image_to_video`: the pictures, each ending with
    /// the node's own crop to the output size.
    Image(&'a GraphNode, Vec<ImagePlan>),
    /// `encode.vae` of a video's frames.
    Video(VideoPlan),
    /// An edit whose output takes its size from one of its reference pictures: the
    /// `encode.vae` of it (fully denoised), or an empty latent sized by `GetImageSize` of it.
    Edit(&'a GraphNode, ImagePlan),
}

impl Source<'_> {
    pub(super) fn task(&self) -> TaskType {
        match self {
            Source::Empty(n) if n.params.get("frames").and_then(Value::as_u64).is_none() => TaskType::T2i,
            Source::Empty(_) => TaskType::T2v,
            Source::Image(..) => TaskType::I2v,
            Source::Video(_) => TaskType::V2v,
            Source::Edit(..) => TaskType::I2i,
        }
    }

    /// Size, frames, inputs.
    pub(super) fn fill(self, run: &mut RunPlan) -> Result<(), CompileError> {
        match self {
            Source::Empty(n) | Source::Image(n, _) => {
                run.width = Some(number(n, "width")? as u32);
                run.height = Some(number(n, "height")? as u32);
                run.frames = Some(n.params.get("frames").and_then(Value::as_u64).unwrap_or(1) as u32);
                if let Source::Image(_, images) = self {
                    run.images = images;
                }
            }
            // The model's size for its last reference, known when the pictures are read.
            Source::Edit(n, _) => (run.frames, run.size_node) = (Some(1), n.origin.clone()),
            // The size is the video's (through its resizes): known when it is read.
            Source::Video(video) => {
                run.size_node = video.resize.last().map_or(&video.node, |r| &r.node).clone();
                run.video = Some(video);
            }
        }
        Ok(())
    }
}

fn batch_of_one(n: &GraphNode) -> Result<(), CompileError> {
    let batch = n.params.get("batch").and_then(Value::as_u64).unwrap_or(1);
    if batch != 1 {
        return Err(CompileError::node(&n.origin, format!("batch_size {batch}: one video per request; set 1")));
    }
    Ok(())
}

impl<'a> Lowering<'a> {
    /// The text `param` of `n` is conditioned on, and the image-to-video node it passes
    /// through on the way, if any; an edit's reference pictures on the way go to `refs`.
    pub(super) fn conditioning(
        &self,
        n: &GraphNode,
        param: &str,
        files: &mut Vec<ModelFile>,
        refs: &mut Vec<ImagePlan>,
    ) -> Result<(Option<String>, Option<&'a GraphNode>), CompileError> {
        let Some((e, k)) = self.input(n, param) else { return Ok((None, None)) };
        match e.stage.as_str() {
            "encode.text" => {
                self.text_encoder(e, files)?;
                if let Some((gen, _)) = self.input(e, "text").filter(|(g, _)| g.stage == "text.generate") {
                    let msg = format!(
                        "its prompt is written by node {} (an LLM prompt enhancer such as TextGenerateLTX2Prompt), which \
                         this runtime does not run; give the prompt as text (switch the enhancer off)",
                        gen.origin
                    );
                    return Err(CompileError::node(&e.origin, msg));
                }
                Ok((Some(text(e, "text")?), None))
            }
            // LTX-2's frame rate and keyframe-guide nodes pass the text through (outputs 0 and
            // 1 are the positive and the negative).
            "condition.frame_rate" | "condition.crop_guides" if k < 2 => {
                let (text, _) = self.conditioning(e, ["positive", "negative"][k], files, refs)?;
                Ok((text, None))
            }
            "condition.reference" | "condition.reference_method" | "encode.text_edit" => {
                Ok((self.edit_conditioning(e, files, refs)?, None))
            }
            // Zeroed embeddings guide nowhere: no negative prompt (the caller checks the cfg).
            "encode.zero" => Ok((None, None)),
            // Output 0 is the conditioned positive, 1 the negative.
            "condition.image_to_video" => {
                let (text, _) = self.conditioning(e, ["positive", "negative"][k.min(1)], files, refs)?;
                Ok((text, Some(e)))
            }
            other => {
                let msg = format!(
                    "`{param}` comes from node {} (`{other}`); this runtime conditions on text (`encode.text`), optionally through an image-to-video node",
                    e.origin
                );
                Err(CompileError::node(&n.origin, msg))
            }
        }
    }

    /// The text encoder `e` (`encode.text`, `encode.text_edit`) reads, its file pushed to `files`.
    pub(super) fn text_encoder(&self, e: &GraphNode, files: &mut Vec<ModelFile>) -> Result<(), CompileError> {
        const FROM: [&str; 3] = ["load.text_encoder", "load.checkpoint", "model.lora"];
        let (mut enc, _) = self.expect(e, "text_encoder", &FROM)?;
        // A LoraLoader's CLIP output: the text encoder it was given (the adapter's
        // strength_clip has nothing to act on: text-encoder keys are refused at load).
        while enc.stage == "model.lora" {
            enc = self.expect(enc, "text_encoder", &FROM)?.0;
        }
        push_file(files, self.file(enc, "text_encoder")?);
        Ok(())
    }

    /// What makes `latent`, the sampler's latent; `via` is the image-to-video node its
    /// conditioning passes through, `refs` an edit's reference pictures.
    pub(super) fn source(
        &self,
        sampler: &GraphNode,
        latent: &'a GraphNode,
        via: Option<&'a GraphNode>,
        refs: &[ImagePlan],
        files: &mut Vec<ModelFile>,
    ) -> Result<Source<'a>, CompileError> {
        if !refs.is_empty() {
            return self.edit_source(sampler, latent, refs, files);
        }
        let err = |m: String| Err(CompileError::node(&sampler.origin, m));
        if let Some(v) = via.filter(|v| v.origin != latent.origin) {
            return err(format!(
                "its conditioning comes from image-to-video node {} but its latent from node {}: connect that node's latent",
                v.origin, latent.origin
            ));
        }
        match latent.stage.as_str() {
            "latent.empty" => {
                batch_of_one(latent)?;
                Ok(Source::Empty(latent))
            }
            "condition.image_to_video" if via.is_none() => err(format!(
                "its latent comes from image-to-video node {} but its conditioning does not pass through it: connect that node's positive and negative",
                latent.origin
            )),
            "condition.image_to_video" => self.image_to_video(latent, files),
            "latent.image_to_video" => {
                batch_of_one(latent)?;
                self.vae(latent, "vae", files)?;
                let start = self.picture(latent, "start_image", ImageRole::FirstFrame)?.expect("required by the stage");
                Ok(Source::Image(latent, vec![cropped(start, latent)?]))
            }
            "encode.vae" => {
                self.vae(latent, "vae", files)?;
                Ok(Source::Video(self.video(latent)?))
            }
            "sample" | "sample.custom" => err(format!(
                "its latent comes from sampler node {}: chained samplers are not supported yet",
                latent.origin
            )),
            other => err(format!(
                "its latent comes from node {} (`{other}`); this runtime starts from an empty latent, an image-to-video node or a VAE-encoded video",
                latent.origin
            )),
        }
    }

    /// `WanImageToVideo` / `WanFirstLastFrameToVideo`: its pictures (none: text to video at its
    /// size) and the CLIP vision embeddings, which must be of those pictures.
    fn image_to_video(&self, n: &'a GraphNode, files: &mut Vec<ModelFile>) -> Result<Source<'a>, CompileError> {
        batch_of_one(n)?;
        self.vae(n, "vae", files)?;
        let start = self.picture(n, "start_image", ImageRole::FirstFrame)?;
        let end = self.picture(n, "end_image", ImageRole::LastFrame)?;
        self.clip(n, "clip_vision", "start_image", start.as_ref(), files)?;
        self.clip(n, "clip_vision_end", "end_image", end.as_ref(), files)?;
        let images = match (start, end) {
            (None, None) => return Ok(Source::Empty(n)),
            (None, Some(_)) => {
                let msg = "`end_image` without `start_image`: this runtime's first-and-last-frame models need the first frame too";
                return Err(CompileError::node(&n.origin, msg));
            }
            (Some(s), e) => std::iter::once(s).chain(e).map(|p| cropped(p, n)).collect::<Result<_, _>>()?,
        };
        Ok(Source::Image(n, images))
    }

    /// The CLIP vision embedding `param` of image-to-video node `n`, which must be of `image`
    /// (its input `image_param`): the model encodes that picture itself.
    fn clip(
        &self,
        n: &GraphNode,
        param: &str,
        image_param: &str,
        image: Option<&ImagePlan>,
        files: &mut Vec<ModelFile>,
    ) -> Result<(), CompileError> {
        let Some((enc, _)) = self.input(n, param) else { return Ok(()) };
        if enc.stage != "encode.clip_vision" {
            let msg = format!(
                "`{param}` comes from node {} (`{}`); this runtime takes a CLIPVisionEncode of the {image_param}",
                enc.origin, enc.stage
            );
            return Err(CompileError::node(&n.origin, msg));
        }
        let (loader, _) = self.expect(enc, "clip_vision", &["load.clip_vision"])?;
        push_file(files, self.file(loader, "clip_vision")?);
        let seen = self.picture(enc, "images", ImageRole::FirstFrame)?.expect("required by the stage");
        match image {
            None => Err(CompileError::node(
                &n.origin,
                format!("`{param}` is connected but `{image_param}` is not: connect the picture it encodes"),
            )),
            Some(p) if p.node != seen.node => Err(CompileError::node(
                &enc.origin,
                format!(
                    "encodes node {}'s picture, but node {}'s {image_param} is node {}'s: this runtime's model encodes the {image_param} itself",
                    seen.node, n.origin, p.node
                ),
            )),
            Some(_) => Ok(()),
        }
    }

    /// The picture `param` of `n` is, followed back through resizes to its `LoadImage`.
    pub(super) fn picture(
        &self,
        n: &GraphNode,
        param: &str,
        role: ImageRole,
    ) -> Result<Option<ImagePlan>, CompileError> {
        let Some((mut p, mut k)) = self.input(n, param) else { return Ok(None) };
        let mut resize = Vec::new();
        while p.stage == "image.resize" {
            resize.push(Resize::of(p)?);
            (p, k) = self.need(p, "images")?;
        }
        if p.stage != "load.image" || k != 0 {
            let msg = format!(
                "`{param}` comes from node {} (`{}`); this runtime reads pictures from LoadImage, through resize nodes",
                p.origin, p.stage
            );
            return Err(CompileError::node(&n.origin, msg));
        }
        resize.reverse();
        Ok(Some(ImagePlan { role, node: p.origin.clone(), file: file_name(p)?, resize }))
    }

    /// The video `encode` (`encode.vae`) encodes: frames of a `LoadVideo` through
    /// `GetVideoComponents`, maybe resized.
    fn video(&self, encode: &GraphNode) -> Result<VideoPlan, CompileError> {
        let (mut p, mut k) = self.need(encode, "images")?;
        let mut resize = Vec::new();
        while p.stage == "image.resize" {
            resize.push(Resize::of(p)?);
            (p, k) = self.need(p, "images")?;
        }
        match (p.stage.as_str(), k) {
            ("video.components", 0) => {}
            ("load.image", _) => {
                let msg = format!(
                    "encodes node {}'s picture: image to image is not supported; video to video reads LoadVideo through GetVideoComponents",
                    p.origin
                );
                return Err(CompileError::node(&encode.origin, msg));
            }
            (other, _) => {
                let msg = format!(
                    "`pixels` come from node {} (`{other}`); this runtime encodes the frames of a LoadVideo (GetVideoComponents)",
                    p.origin
                );
                return Err(CompileError::node(&encode.origin, msg));
            }
        }
        let (v, _) = self.expect(p, "video", &["load.video"])?;
        resize.reverse();
        Ok(VideoPlan { node: v.origin.clone(), file: file_name(v)?, resize })
    }
}

/// A loader's `file`.
fn file_name(n: &GraphNode) -> Result<String, CompileError> {
    match n.params.get("file") {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        _ => Err(CompileError::node(&n.origin, "names no file (a file name in the input folder)")),
    }
}

/// `picture` with the image-to-video node `n`'s crop to its output size appended.
fn cropped(mut picture: ImagePlan, n: &GraphNode) -> Result<ImagePlan, CompileError> {
    let (w, h) = (number(n, "width")? as u32, number(n, "height")? as u32);
    picture.resize.push(Resize::wan_crop(&n.origin, w, h));
    Ok(picture)
}
