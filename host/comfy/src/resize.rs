//! One resize step of a picture on its way to a request: what an `image.resize` graph node asks
//! for (ComfyUI's `ImageScale`, `ImageScaleBy`, `ImageScaleToTotalPixels`,
//! `FluxKontextImageScale`, KJNodes' `ImageResizeKJ(v2)`), and the center
//! crop ComfyUI's Wan image-to-video nodes apply to their start and end images. The target
//! size depends on the picture's own size (a side of 0, a scale factor, keeping proportions),
//! so it is computed when the file is read, not when the workflow compiles.

use serde::Serialize;
use serde_json::Value;

use fastvideo_request::InputImage;

use crate::resample::{resample, Method};
use crate::translate::GraphNode;
use crate::CompileError;

/// How a picture meets a size of another aspect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fit {
    /// Stretched to exactly the size.
    Stretch,
    /// Cut to the size's aspect (at `anchor`), then scaled to exactly the size.
    Crop,
    /// Scaled to fit inside the size, keeping its aspect (the result may be smaller).
    Contain,
}

/// Which part of a picture a crop keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Anchor {
    /// The middle.
    Center,
    /// The top edge (full width).
    Top,
    /// The bottom edge.
    Bottom,
    /// The left edge (full height).
    Left,
    /// The right edge.
    Right,
}

/// One resize step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Resize {
    /// The ComfyUI node asking for it.
    pub node: String,
    /// Target width; 0 takes it from the picture (see `zero_keeps_aspect`).
    pub width: u32,
    /// Target height; 0 as for `width`.
    pub height: u32,
    /// A factor on both sides instead of a size (`ImageScaleBy`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale: Option<f64>,
    /// A pixel count instead of a size, in units of 1024² (`ImageScaleToTotalPixels`), each
    /// side then rounded to a multiple of `divisible_by`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub megapixels: Option<f64>,
    /// The preferred FLUX Kontext size of the picture's aspect (`FluxKontextImageScale`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub kontext: bool,
    /// The resampling filter.
    pub method: Method,
    /// How a different aspect is met.
    pub fit: Fit,
    /// Where a crop is taken.
    pub anchor: Anchor,
    /// Each side is rounded down to a multiple of this (0 or 1: as computed).
    pub divisible_by: u32,
    /// A side of 0 follows the other side's scale (`ImageScale`); otherwise it is the
    /// picture's own (`ImageResizeKJv2`).
    pub zero_keeps_aspect: bool,
}

/// FLUX Kontext's preferred sizes, which `FluxKontextImageScale` picks the one of the picture's
/// aspect from (the first of equally close ones).
const KONTEXT: [(u32, u32); 17] = [
    (672, 1568),
    (688, 1504),
    (720, 1456),
    (752, 1392),
    (800, 1328),
    (832, 1248),
    (880, 1184),
    (944, 1104),
    (1024, 1024),
    (1104, 944),
    (1184, 880),
    (1248, 832),
    (1328, 800),
    (1392, 752),
    (1456, 720),
    (1504, 688),
    (1568, 672),
];

/// Python's `round` (ties to even), as ComfyUI computes sizes.
fn py_round(x: f64) -> u32 {
    x.round_ties_even().max(0.0) as u32
}

impl Resize {
    /// The crop ComfyUI's Wan image-to-video nodes apply to a start or end image:
    /// `common_upscale(image, width, height, "bilinear", "center")`.
    pub fn wan_crop(node: &str, width: u32, height: u32) -> Self {
        Resize {
            node: node.to_string(),
            width,
            height,
            scale: None,
            megapixels: None,
            kontext: false,
            method: Method::Bilinear,
            fit: Fit::Crop,
            anchor: Anchor::Center,
            divisible_by: 0,
            zero_keeps_aspect: true,
        }
    }

    /// Reads an `image.resize` graph node's parameters.
    pub fn of(n: &GraphNode) -> Result<Self, CompileError> {
        let err = |m: String| CompileError::node(&n.origin, m);
        let p = &n.params;
        if let Some(mode) = p.get("mode").and_then(Value::as_str) {
            return Err(err(format!(
                "resize `{mode}` is not run yet (`scale dimensions`, `scale by multiplier` and `scale total pixels` are)"
            )));
        }
        let side = |k: &str| match p.get(k) {
            None | Some(Value::Null) => Ok(0),
            Some(v) => v.as_u64().map(|v| v as u32).ok_or_else(|| err(format!("`{k}` must be a whole number ≥ 0"))),
        };
        let word = |k: &str, default: &str| p.get(k).and_then(Value::as_str).unwrap_or(default).to_string();
        let method = word("method", "bilinear");
        let method = Method::parse(&method)
            .ok_or_else(|| err(format!("upscale method `{method}` is not one this runtime has ({})", Method::NAMES)))?;
        let fit = match word("fit", "stretch").as_str() {
            "stretch" => Fit::Stretch,
            "crop" => Fit::Crop,
            "contain" => Fit::Contain,
            other => return Err(err(format!("fit `{other}`: this runtime resizes by stretch, crop or contain"))),
        };
        let anchor = match word("anchor", "center").as_str() {
            "center" => Anchor::Center,
            "top" => Anchor::Top,
            "bottom" => Anchor::Bottom,
            "left" => Anchor::Left,
            "right" => Anchor::Right,
            other => return Err(err(format!("crop position `{other}` is not center, top, bottom, left or right"))),
        };
        let scale = match p.get("scale") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.as_f64().filter(|s| *s > 0.0).ok_or_else(|| err("`scale_by` must be above 0".into()))?),
        };
        let megapixels = match p.get("megapixels") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.as_f64().filter(|m| *m > 0.0).ok_or_else(|| err("`megapixels` must be above 0".into()))?),
        };
        Ok(Resize {
            node: n.origin.clone(),
            width: side("width")?,
            height: side("height")?,
            scale,
            megapixels,
            kontext: p.get("kontext").and_then(Value::as_bool).unwrap_or(false),
            method,
            fit,
            anchor,
            divisible_by: side("divisible_by")?,
            zero_keeps_aspect: p.get("zero_keeps_aspect").and_then(Value::as_bool).unwrap_or(true),
        })
    }

    /// The size a `w`×`h` picture becomes.
    pub fn size(&self, w: u32, h: u32) -> Result<(u32, u32), String> {
        let (fw, fh) = (w as f64, h as f64);
        if let Some(mp) = self.megapixels {
            // ComfyUI: round(side · √(mp·1024² / (w·h)) / steps) · steps.
            let s = (mp * 1024.0 * 1024.0 / (fw * fh)).sqrt();
            let step = self.divisible_by.max(1) as f64;
            let side = |x: f64| (py_round(x * s / step) as f64 * step) as u32;
            let (tw, th) = (side(fw), side(fh));
            if tw == 0 || th == 0 {
                return Err(format!("resizes the {w}x{h} picture to {tw}x{th}, which is empty"));
            }
            return Ok((tw, th));
        }
        if self.kontext {
            let aspect = fw / fh;
            let best = KONTEXT.iter().min_by(|a, b| {
                let d = |&(x, y): &(u32, u32)| (aspect - x as f64 / y as f64).abs();
                d(a).total_cmp(&d(b))
            });
            return Ok(*best.expect("a list"));
        }
        let (mut tw, mut th) = match (self.scale, self.width, self.height) {
            (Some(s), _, _) => (py_round(fw * s), py_round(fh * s)),
            (None, 0, 0) => (w, h),
            (None, 0, th) if self.zero_keeps_aspect => (py_round(fw * th as f64 / fh).max(1), th),
            (None, tw, 0) if self.zero_keeps_aspect => (tw, py_round(fh * tw as f64 / fw).max(1)),
            (None, tw, th) => (if tw == 0 { w } else { tw }, if th == 0 { h } else { th }),
        };
        if self.fit == Fit::Contain {
            let r = (tw as f64 / fw).min(th as f64 / fh);
            (tw, th) = (py_round(fw * r), py_round(fh * r));
        }
        if self.divisible_by > 1 {
            (tw, th) = (tw - tw % self.divisible_by, th - th % self.divisible_by);
        }
        if tw == 0 || th == 0 {
            return Err(format!("resizes the {w}x{h} picture to {tw}x{th}, which is empty"));
        }
        Ok((tw, th))
    }

    /// The part of a `w`×`h` picture a crop to `tw`×`th` keeps: (x, y, width, height).
    fn crop_box(&self, (w, h): (u32, u32), (tw, th): (u32, u32)) -> (u32, u32, u32, u32) {
        let (fw, fh) = (w as f64, h as f64);
        let (old, new) = (fw / fh, tw as f64 / th as f64);
        if self.anchor == Anchor::Center {
            // comfy.utils.common_upscale's center crop.
            let x = if old > new { py_round((fw - fw * (new / old)) / 2.0) } else { 0 };
            let y = if old < new { py_round((fh - fh * (old / new)) / 2.0) } else { 0 };
            return (x, y, w - 2 * x, h - 2 * y);
        }
        // KJNodes' positioned crop.
        let (cw, ch) = if old > new { (py_round(fh * new).max(1), h) } else { (w, py_round(fw / new).max(1)) };
        let (x, y) = match self.anchor {
            Anchor::Top => ((w - cw) / 2, 0),
            Anchor::Bottom => ((w - cw) / 2, h - ch),
            Anchor::Left => (0, (h - ch) / 2),
            Anchor::Right => (w - cw, (h - ch) / 2),
            Anchor::Center => unreachable!("handled above"),
        };
        (x, y, cw, ch)
    }

    /// Whether a `w`×`h` picture would lose part of itself (a crop to another aspect).
    pub fn crops(&self, w: u32, h: u32) -> Result<bool, String> {
        let target = self.size(w, h)?;
        Ok(self.fit == Fit::Crop && self.crop_box((w, h), target) != (0, 0, w, h))
    }

    /// The picture after this step.
    pub fn apply(&self, image: &InputImage) -> Result<InputImage, String> {
        let (w, h) = (image.width, image.height);
        let target = self.size(w, h)?;
        let (x, y, cw, ch) = if self.fit == Fit::Crop { self.crop_box((w, h), target) } else { (0, 0, w, h) };
        let cut: std::borrow::Cow<[u8]> = if (cw, ch) == (w, h) {
            std::borrow::Cow::Borrowed(&image.rgb)
        } else {
            (y..y + ch)
                .flat_map(|row| {
                    let start = ((row * w + x) * 3) as usize;
                    image.rgb[start..start + (cw * 3) as usize].iter().copied()
                })
                .collect()
        };
        let rgb = resample(&cut, (cw, ch), target, self.method);
        Ok(InputImage { role: image.role, width: target.0, height: target.1, rgb })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fastvideo_request::ImageRole;

    fn step(width: u32, height: u32, fit: Fit) -> Resize {
        Resize { fit, method: Method::NearestExact, ..Resize::wan_crop("7", width, height) }
    }

    #[test]
    fn sizes_follow_comfyuis_rules() {
        assert_eq!(step(0, 0, Fit::Stretch).size(640, 480), Ok((640, 480)), "ImageScale 0×0 keeps the picture");
        assert_eq!(step(0, 240, Fit::Stretch).size(640, 480), Ok((320, 240)), "a 0 side follows the other");
        let kj = Resize { zero_keeps_aspect: false, ..step(0, 240, Fit::Stretch) };
        assert_eq!(kj.size(640, 480), Ok((640, 240)), "KJNodes: a 0 side is the picture's own");
        assert_eq!(step(300, 300, Fit::Contain).size(640, 480), Ok((300, 225)));
        let div = Resize { divisible_by: 16, ..step(300, 300, Fit::Contain) };
        assert_eq!(div.size(640, 480), Ok((288, 224)));
        let by = Resize { scale: Some(0.5), ..step(0, 0, Fit::Stretch) };
        assert_eq!(by.size(5, 3), Ok((2, 2)), "round(2.5) and round(1.5) are 2 in Python");
        let total = Resize { megapixels: Some(1.0), ..step(0, 0, Fit::Stretch) };
        assert_eq!(total.size(640, 480), Ok((1182, 887)), "ImageScaleToTotalPixels: 1 MP of 4:3");
        let stepped = Resize { divisible_by: 64, ..total.clone() };
        assert_eq!(stepped.size(640, 480), Ok((1152, 896)), "sides rounded to resolution_steps");
        let kontext = Resize { kontext: true, ..step(0, 0, Fit::Crop) };
        assert_eq!(kontext.size(640, 480), Ok((1184, 880)), "the Kontext size nearest 4:3");
        assert_eq!(kontext.size(100, 100), Ok((1024, 1024)));
        assert!(step(1, 1, Fit::Contain).size(640, 10).unwrap_err().contains("empty"));
    }

    #[test]
    fn a_center_crop_keeps_the_middle_of_a_wider_picture() {
        // 4×1: columns 0, 1, 2, 3 (red channel); cropping to 2×1 keeps columns 1 and 2.
        let rgb: Vec<u8> = (0..4u8).flat_map(|x| [x, 0, 0]).collect();
        let image = InputImage { role: ImageRole::FirstFrame, width: 4, height: 1, rgb };
        let r = step(2, 1, Fit::Crop);
        assert!(r.crops(4, 1).unwrap() && !r.crops(8, 4).unwrap());
        let out = r.apply(&image).unwrap();
        assert_eq!((out.width, out.height, out.rgb), (2, 1, vec![1, 0, 0, 2, 0, 0]));
        let right = Resize { anchor: Anchor::Right, ..r };
        assert_eq!(right.apply(&image).unwrap().rgb, vec![2, 0, 0, 3, 0, 0]);
        let stretched = step(2, 1, Fit::Stretch).apply(&image).unwrap();
        assert_eq!(stretched.rgb, vec![1, 0, 0, 3, 0, 0], "nearest-exact samples columns 1 and 3");
    }
}
