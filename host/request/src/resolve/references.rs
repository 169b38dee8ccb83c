//! Reference pictures of an editing request (`i2i`): how many a model takes, the sizes it
//! accepts, and the output size an edit gets when the request names none.

use serde::{Deserialize, Serialize};

use crate::{ImageRole, InputImage, InputPart, ModelLimits, OmniRequest, RequestError};

/// The reference rules of an editing model.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ReferenceLimits {
    /// Most reference pictures a request may give.
    pub max_references: u32,
    /// Shortest side a reference may have, in pixels.
    pub min_reference_side: u32,
    /// Largest ratio of a reference's long side to its short side.
    pub max_reference_aspect: f64,
    /// References larger than this many pixels are scaled down to it (aspect kept).
    pub max_reference_area: u64,
    /// References are scaled to `max_reference_area` whatever their size, each side rounded to
    /// a multiple of 32 (Qwen-Image-Edit's `calculate_dimensions`), instead of only scaled down.
    #[serde(default)]
    pub scale_to_area: bool,
}

impl ReferenceLimits {
    /// Checks the references among `images` (decoded in input order; `fields` are their
    /// request fields): at least one for `i2i`, at most `max_references`, each within the
    /// side and aspect rules.
    pub fn check(&self, images: &[InputImage], fields: &[String]) -> Result<(), RequestError> {
        let refs: Vec<(&InputImage, &String)> =
            images.iter().zip(fields).filter(|(i, _)| i.role == ImageRole::Reference).collect();
        if refs.is_empty() {
            return Err(RequestError::new("inputs", "an edit (`i2i`) needs at least one reference picture"));
        }
        if refs.len() > self.max_references as usize {
            return Err(RequestError::new(
                refs[self.max_references as usize].1.clone(),
                format!("{} reference pictures; this model takes at most {}", refs.len(), self.max_references),
            ));
        }
        for (im, field) in refs {
            let (w, h) = (im.width, im.height);
            if w.min(h) < self.min_reference_side {
                return Err(RequestError::new(
                    field.clone(),
                    format!(
                        "a {w}x{h} reference is too small: both sides must be at least {} px",
                        self.min_reference_side
                    ),
                ));
            }
            let aspect = w.max(h) as f64 / w.min(h) as f64;
            if aspect > self.max_reference_aspect {
                return Err(RequestError::new(
                    field.clone(),
                    format!("a {w}x{h} reference's aspect ratio {aspect:.1} is above {}", self.max_reference_aspect),
                ));
            }
        }
        Ok(())
    }

    /// `(width, height)` of a reference as the model uses it: scaled down to
    /// `max_reference_area` when larger (truncating, as the reference pipeline), then cut to
    /// multiples of `multiple`.
    pub fn used_size(&self, width: u32, height: u32, multiple: u32) -> (u32, u32) {
        if self.scale_to_area {
            let ratio = width as f64 / height as f64;
            let w = (self.max_reference_area as f64 * ratio).sqrt();
            let h = w / ratio;
            let r = |x: f64| ((x / 32.0).round_ties_even() * 32.0) as u32;
            return (r(w) / multiple * multiple, r(h) / multiple * multiple);
        }
        let (mut w, mut h) = (width, height);
        if w as u64 * h as u64 > self.max_reference_area {
            let scale = (self.max_reference_area as f64 / (w as f64 * h as f64)).sqrt();
            (w, h) = ((w as f64 * scale) as u32, (h as f64 * scale) as u32);
        }
        (w / multiple * multiple, h / multiple * multiple)
    }
}

impl OmniRequest {
    /// An edit's pictures (decoded, in input order) against the model's reference rules; a model
    /// without them takes no edit, naming `task`.
    pub(super) fn check_references(&self, limits: &ModelLimits, images: &[InputImage]) -> Result<(), RequestError> {
        let rules = limits.references.as_ref().ok_or_else(|| {
            RequestError::new("task", format!("{} takes no reference pictures (`i2i`)", limits.family))
        })?;
        let fields: Vec<String> = self
            .inputs
            .iter()
            .enumerate()
            .filter(|(_, p)| matches!(p, InputPart::Image { .. }))
            .map(|(i, _)| format!("inputs[{i}]"))
            .collect();
        rules.check(images, &fields)
    }

    /// The request's size parameters, an edit's missing sides taken from its last reference as
    /// the model uses it (scaled to its largest area, cut to the size multiple).
    pub(super) fn edit_size(&self, limits: &ModelLimits, images: &[InputImage]) -> crate::DiffusionParams {
        let mut d = self.diffusion.clone();
        let last = images.iter().rev().find(|i| i.role == crate::ImageRole::Reference);
        if let (Some(rules), Some(pic), Some(im)) = (&limits.references, &limits.picture, last) {
            let (w, h) = rules.used_size(im.width, im.height, pic.spatial_multiple);
            d.width = d.width.or(Some(w));
            d.height = d.height.or(Some(h));
        }
        d
    }
}
