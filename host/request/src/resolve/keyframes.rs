//! Keyframe inputs (`{"type": "keyframe", "frame": F, "strength": S}`): pictures placed at a
//! frame of the video with a strength, as LTX-2's condition pipeline takes them. Read, decoded
//! and checked here before any model work; a model that cannot place pictures (its
//! `image_roles` lack `keyframe`) refuses them naming the input.

use crate::{ImageRole, InputImage, InputPart, Keyframe, ModelLimits, OmniRequest, RequestError, TaskType};

impl OmniRequest {
    /// Whether the request carries keyframe inputs.
    pub(crate) fn has_keyframes(&self) -> bool {
        self.inputs.iter().any(|p| matches!(p, InputPart::Keyframe { .. }))
    }

    /// The keyframes, decoded: each a picture the model can place (`limits.image_roles` has
    /// `keyframe`) at a frame it can place one at (0, or 1 + k × the frame multiple, before
    /// `num_frames`), one per frame, with a strength in `[0, 1]`; not beside a first-frame image.
    pub(super) fn resolve_keyframes(
        &self,
        limits: &ModelLimits,
        num_frames: u32,
        images: &[InputImage],
    ) -> Result<Vec<Keyframe>, RequestError> {
        let mut out: Vec<Keyframe> = Vec::new();
        for (i, part) in self.inputs.iter().enumerate() {
            let InputPart::Keyframe { path, b64, frame, strength } = part else { continue };
            let field = format!("inputs[{i}]");
            if !limits.image_roles.contains(&ImageRole::Keyframe) {
                return Err(RequestError::new(
                    field,
                    format!("{} takes no keyframe pictures (a picture at a frame with a strength)", limits.family),
                ));
            }
            if self.task != TaskType::I2v {
                return Err(RequestError::new(
                    field,
                    format!("keyframes condition image to video (`i2v`), not `{}`", self.task.as_str()),
                ));
            }
            if images.iter().any(|im| im.role == ImageRole::FirstFrame) {
                return Err(RequestError::new(
                    field,
                    "a first-frame image and keyframes together; give the first frame as a keyframe at frame 0",
                ));
            }
            if !(strength.is_finite() && (0.0..=1.0).contains(strength)) {
                return Err(RequestError::new(format!("{field}.strength"), format!("{strength} is outside [0, 1]")));
            }
            let frame_field = format!("{field}.frame");
            if *frame >= num_frames {
                return Err(RequestError::new(
                    frame_field,
                    format!("{frame} is past the clip's last frame ({})", num_frames.saturating_sub(1)),
                ));
            }
            let m = limits.video.as_ref().map_or(1, |v| v.frame_multiple.max(1));
            if *frame != 0 && (frame - 1) % m != 0 {
                let below = 1 + (frame - 1) / m * m;
                return Err(RequestError::new(
                    frame_field,
                    format!(
                        "{frame}: {} places pictures at frame 0 or 1 + {m}k (one per latent frame), e.g. {below} or {}",
                        limits.family,
                        below + m
                    ),
                ));
            }
            if out.iter().any(|k| k.frame == *frame) {
                return Err(RequestError::new(frame_field, format!("a second keyframe at frame {frame}")));
            }
            let bytes = crate::image_bytes(path.as_deref(), b64.as_deref(), &field)?;
            let image = crate::decode_image(&bytes, ImageRole::Keyframe, &field)?;
            out.push(Keyframe { image, frame: *frame, strength: *strength });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use crate::{ImageRole, InputPart, ModelLimits, OmniRequest, TaskType};

    fn png_b64() -> String {
        use base64::Engine as _;
        let mut png = Vec::new();
        image::RgbImage::new(4, 2).write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png).unwrap();
        base64::engine::general_purpose::STANDARD.encode(&png)
    }

    /// LTX-2-like limits: image to video, first frames and keyframes, frames 4k + 1.
    fn keyed() -> ModelLimits {
        let mut l = ModelLimits::example();
        l.family = "LTX-2".into();
        l.tasks = vec![TaskType::T2v, TaskType::I2v];
        l.image_roles = vec![ImageRole::FirstFrame, ImageRole::Keyframe];
        l
    }

    /// An `i2v` request of 17 frames with keyframes at `(frame, strength)`.
    fn with(frames: &[(u32, f64)]) -> OmniRequest {
        let mut r = OmniRequest::text_to_video("k", "a red circle");
        r.task = TaskType::I2v;
        r.diffusion.num_frames = Some(17);
        for &(frame, strength) in frames {
            r.inputs.push(InputPart::Keyframe { path: None, b64: Some(png_b64()), frame, strength });
        }
        r
    }

    #[test]
    fn keyframes_resolve_in_order_with_their_frames_and_strengths() {
        let r = with(&[(0, 0.8), (9, 0.5), (16 - 3, 1.0)]).resolve(&keyed(), || 0).unwrap();
        let got: Vec<(u32, f64, ImageRole)> = r.keyframes.iter().map(|k| (k.frame, k.strength, k.image.role)).collect();
        assert_eq!(got, [(0, 0.8, ImageRole::Keyframe), (9, 0.5, ImageRole::Keyframe), (13, 1.0, ImageRole::Keyframe)]);
        assert!(r.images.is_empty(), "keyframes stand in for the first frame");
        // The wire form: `strength` defaults to 1.
        let part: InputPart = serde_json::from_str(r#"{"type": "keyframe", "path": "a.png", "frame": 9}"#).unwrap();
        assert_eq!(part, InputPart::Keyframe { path: Some("a.png".into()), b64: None, frame: 9, strength: 1.0 });
    }

    #[test]
    fn bad_keyframes_are_refused_naming_the_field() {
        let l = keyed();
        let cases: [(OmniRequest, &str, &str); 5] = [
            (with(&[(6, 1.0)]), "inputs[1].frame", "frame 0 or 1 + 4k (one per latent frame), e.g. 5 or 9"),
            (with(&[(17, 1.0)]), "inputs[1].frame", "past the clip's last frame (16)"),
            (with(&[(9, 1.5)]), "inputs[1].strength", "outside [0, 1]"),
            (with(&[(9, f64::NAN)]), "inputs[1].strength", "outside [0, 1]"),
            (with(&[(9, 1.0), (9, 0.5)]), "inputs[2].frame", "a second keyframe at frame 9"),
        ];
        for (r, field, rule) in cases {
            let e = r.resolve(&l, || 0).unwrap_err();
            assert_eq!(e.field, field, "{e}");
            assert!(e.rule.contains(rule), "{e}");
        }
        // A family that cannot place pictures refuses them, naming the input.
        let mut wan = ModelLimits::example();
        wan.tasks.push(TaskType::I2v);
        let e = with(&[(0, 1.0)]).resolve(&wan, || 0).unwrap_err();
        assert_eq!((e.field.as_str(), e.rule.contains("Wan takes no keyframe pictures")), ("inputs[1]", true), "{e}");
        // Beside a first-frame image; on a text-to-video request.
        let mut r = with(&[(9, 1.0)]);
        r.inputs.push(InputPart::Image { path: None, b64: Some(png_b64()), role: ImageRole::FirstFrame });
        let e = r.resolve(&l, || 0).unwrap_err();
        assert_eq!((e.field.as_str(), e.rule.contains("as a keyframe at frame 0")), ("inputs[1]", true), "{e}");
        let mut r = with(&[(9, 1.0)]);
        r.task = TaskType::T2v;
        assert_eq!(r.resolve(&l, || 0).unwrap_err().field, "inputs[1]");
        // A keyframe role on a plain image input.
        let mut r = with(&[]);
        r.inputs.push(InputPart::Image { path: None, b64: Some(png_b64()), role: ImageRole::Keyframe });
        let e = r.resolve(&l, || 0).unwrap_err();
        assert_eq!((e.field.as_str(), e.rule.contains("`keyframe` input")), ("inputs[1]", true), "{e}");
    }
}
