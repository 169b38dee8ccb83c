//! A request's inputs besides text, read and checked by `resolve` before any model work: the
//! pictures of image to video (each a role the model takes), the video of video to video, and
//! request-supplied latents. Errors name `inputs[i]`.

use std::collections::BTreeMap;

use crate::{InputImage, InputPart, InputVideo, LatentInput, OmniRequest, RequestError, TaskType};

impl OmniRequest {
    /// The latent inputs by name (`latents` when unnamed), at most one per name, each's data
    /// matching its shape.
    pub(crate) fn latent_inputs(&self) -> Result<BTreeMap<String, LatentInput>, RequestError> {
        let mut found = BTreeMap::new();
        for (i, part) in self.inputs.iter().enumerate() {
            let InputPart::Latent { name, shape, data } = part else { continue };
            let field = format!("inputs[{i}]");
            let name = name.clone().unwrap_or_else(|| "latents".into());
            if found.contains_key(&name) {
                return Err(RequestError::new(field, format!("a second latent input named `{name}`")));
            }
            let n = shape.iter().try_fold(1i64, |acc, &d| if d > 0 { acc.checked_mul(d) } else { None });
            if n != Some(data.len() as i64) {
                return Err(RequestError::new(
                    field,
                    format!("shape {shape:?} does not hold the {} values given", data.len()),
                ));
            }
            found.insert(name, LatentInput { shape: shape.clone(), data: data.clone() });
        }
        Ok(found)
    }

    /// Reads and decodes the video input of a `v2v` request (exactly one).
    pub(crate) fn decode_video(&self) -> Result<Option<InputVideo>, RequestError> {
        let mut video = None;
        for (i, part) in self.inputs.iter().enumerate() {
            let InputPart::Video { path, b64 } = part else { continue };
            let field = format!("inputs[{i}]");
            if self.task != TaskType::V2v && !crate::is_action_task(self.task) {
                return Err(RequestError::new(field, format!("`{}` takes no video inputs", self.task.as_str())));
            }
            if video.is_some() {
                return Err(RequestError::new(field, "a second video (video to video takes one)"));
            }
            let bytes = crate::image_bytes(path.as_deref(), b64.as_deref(), &field)?;
            video = Some(crate::decode_video(&bytes, &field)?);
        }
        if self.task == TaskType::V2v && video.is_none() {
            return Err(RequestError::new("inputs", "video to video needs a video input"));
        }
        Ok(video)
    }

    /// Reads and decodes the image inputs (before any model work, so a bad picture costs
    /// nothing): image-to-video only, at most one per role, each a role the model takes
    /// (`roles`), and every one of them present.
    pub(crate) fn decode_images(&self, roles: &[crate::ImageRole]) -> Result<Vec<InputImage>, RequestError> {
        let mut images: Vec<InputImage> = Vec::new();
        for (i, part) in self.inputs.iter().enumerate() {
            let InputPart::Image { path, b64, role } = part else { continue };
            let field = format!("inputs[{i}]");
            if !matches!(self.task, TaskType::I2v | TaskType::I2i | TaskType::Policy | TaskType::ForwardDynamics) {
                return Err(RequestError::new(field, format!("`{}` takes no image inputs", self.task.as_str())));
            }
            // An edit's pictures are references; a picture sent without a role is one.
            let role = match (self.task, role) {
                (TaskType::I2i, crate::ImageRole::FirstFrame | crate::ImageRole::Reference) => {
                    &crate::ImageRole::Reference
                }
                (TaskType::I2i, other) => {
                    return Err(RequestError::new(
                        field,
                        format!("an edit takes reference pictures, not a `{}` image", other.as_str()),
                    ))
                }
                (_, crate::ImageRole::Keyframe) => {
                    return Err(RequestError::new(
                        field,
                        "a keyframe picture is a `keyframe` input, with the frame it goes at (and its strength)",
                    ))
                }
                (_, crate::ImageRole::Reference) => {
                    return Err(RequestError::new(
                        field,
                        format!("reference pictures are for edits (`i2i`), not `{}`", self.task.as_str()),
                    ))
                }
                (_, role) => role,
            };
            if *role != crate::ImageRole::Reference && images.iter().any(|im| im.role == *role) {
                return Err(RequestError::new(field, format!("a second `{}` image", role.as_str())));
            }
            if !roles.contains(role) {
                return Err(RequestError::new(field, format!("this model takes no {} image", role.as_str())));
            }
            let bytes = crate::image_bytes(path.as_deref(), b64.as_deref(), &field)?;
            images.push(crate::decode_image(&bytes, *role, &field)?);
        }
        // Keyframes (their own inputs, checked in `resolve`) stand in for the first frame.
        let keyframes = self.has_keyframes();
        if self.task == TaskType::I2v && !keyframes && !images.iter().any(|im| im.role == crate::ImageRole::FirstFrame)
        {
            return Err(RequestError::new("inputs", "image-to-video needs an image input (the first frame)"));
        }
        let needed = |r: &crate::ImageRole| *r != crate::ImageRole::Keyframe && !keyframes;
        if let Some(missing) = roles
            .iter()
            .filter(|r| needed(r))
            .find(|r| self.task == TaskType::I2v && !images.iter().any(|im| im.role == **r))
        {
            return Err(RequestError::new(
                "inputs",
                format!("this first-and-last-frame model needs a {} image too", missing.as_str()),
            ));
        }
        Ok(images)
    }
}
