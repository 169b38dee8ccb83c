//! How a conditioning picture or video frame of another shape is fitted to the output size,
//! before the model's own resampling. `stretch` is what diffusers' Wan pipelines do (the picture
//! is resized to the output size, aspect not kept); `crop` and `pad` keep the aspect.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

/// The request's `resize_mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResizeMode {
    /// Resized to the output size whatever its aspect (diffusers' default).
    #[default]
    Stretch,
    /// The largest centred region of the output's aspect, then resized (nothing distorted, the
    /// edges of the longer side lost; ComfyUI's `crop: center`).
    Crop,
    /// The whole picture centred on black bars to the output's aspect, then resized (nothing
    /// lost or distorted).
    Pad,
}

impl ResizeMode {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ResizeMode::Stretch => "stretch",
            ResizeMode::Crop => "crop",
            ResizeMode::Pad => "pad",
        }
    }

    /// Parses a wire name (CLI flags and form fields).
    pub fn parse(s: &str) -> Option<ResizeMode> {
        [ResizeMode::Stretch, ResizeMode::Crop, ResizeMode::Pad].into_iter().find(|m| m.as_str() == s)
    }
}

/// RGB8 pixels with their size, borrowed when nothing changed.
#[derive(Debug, Clone, PartialEq)]
pub struct Reframed<'a> {
    /// `height * width * 3` bytes.
    pub rgb: Cow<'a, [u8]>,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
}

/// `rgb` (`width`x`height` RGB8) brought to the aspect of `out_w`x`out_h` as `mode` says; the
/// resize to the exact size is left to the model. Stretch, and any picture already of the
/// output's aspect, come back borrowed.
pub fn reframe(rgb: &[u8], width: u32, height: u32, out_w: u32, out_h: u32, mode: ResizeMode) -> Reframed<'_> {
    let same = Reframed { rgb: Cow::Borrowed(rgb), width, height };
    // Compare aspects exactly: width/height vs out_w/out_h.
    let (wide, tall) = (width as u64 * out_h as u64, height as u64 * out_w as u64);
    if mode == ResizeMode::Stretch || wide == tall {
        return same;
    }
    // The picture is wider than the output when wide > tall.
    let round = |n: u64, d: u64| ((2 * n + d) / (2 * d)).max(1) as u32;
    match mode {
        ResizeMode::Crop => {
            let (w, h) = if wide > tall {
                (round(height as u64 * out_w as u64, out_h as u64).min(width), height)
            } else {
                (width, round(width as u64 * out_h as u64, out_w as u64).min(height))
            };
            let (x0, y0) = ((width - w) / 2, (height - h) / 2);
            let mut out = Vec::with_capacity((w * h * 3) as usize);
            for y in y0..y0 + h {
                let row = ((y * width + x0) * 3) as usize;
                out.extend_from_slice(&rgb[row..row + (w * 3) as usize]);
            }
            Reframed { rgb: Cow::Owned(out), width: w, height: h }
        }
        ResizeMode::Pad => {
            let (w, h) = if wide > tall {
                (width, round(width as u64 * out_h as u64, out_w as u64).max(height))
            } else {
                (round(height as u64 * out_w as u64, out_h as u64).max(width), height)
            };
            let (x0, y0) = ((w - width) / 2, (h - height) / 2);
            let mut out = vec![0u8; (w * h * 3) as usize];
            for y in 0..height {
                let src = ((y * width) * 3) as usize;
                let dst = (((y + y0) * w + x0) * 3) as usize;
                out[dst..dst + (width * 3) as usize].copy_from_slice(&rgb[src..src + (width * 3) as usize]);
            }
            Reframed { rgb: Cow::Owned(out), width: w, height: h }
        }
        ResizeMode::Stretch => same,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `w`x`h` picture whose every pixel says where it was: (x, y, 7).
    fn coords(w: u32, h: u32) -> Vec<u8> {
        (0..h).flat_map(|y| (0..w).flat_map(move |x| [x as u8, y as u8, 7])).collect()
    }

    fn px(r: &Reframed, x: u32, y: u32) -> [u8; 3] {
        let i = ((y * r.width + x) * 3) as usize;
        [r.rgb[i], r.rgb[i + 1], r.rgb[i + 2]]
    }

    #[test]
    fn stretch_and_matching_aspects_borrow() {
        let p = coords(8, 4);
        assert!(matches!(reframe(&p, 8, 4, 32, 32, ResizeMode::Stretch).rgb, Cow::Borrowed(_)));
        for m in [ResizeMode::Crop, ResizeMode::Pad] {
            let r = reframe(&p, 8, 4, 64, 32, m);
            assert!(matches!(r.rgb, Cow::Borrowed(_)) && (r.width, r.height) == (8, 4), "{m:?}");
        }
    }

    #[test]
    fn crop_keeps_the_centre_at_the_output_aspect() {
        // 10x4 to a square: the middle 4 columns (3..7).
        let p = coords(10, 4);
        let r = reframe(&p, 10, 4, 16, 16, ResizeMode::Crop);
        assert_eq!((r.width, r.height), (4, 4));
        assert_eq!((px(&r, 0, 0), px(&r, 3, 3)), ([3, 0, 7], [6, 3, 7]));
        // 4x10 to 32 wide, 16 high (2:1): 4x2 from rows 4..6.
        let p = coords(4, 10);
        let r = reframe(&p, 4, 10, 32, 16, ResizeMode::Crop);
        assert_eq!((r.width, r.height), (4, 2));
        assert_eq!((px(&r, 0, 0), px(&r, 3, 1)), ([0, 4, 7], [3, 5, 7]));
    }

    #[test]
    fn pad_centres_the_whole_picture_on_black() {
        // 6x2 to a square: 6x6, the picture on rows 2..4.
        let p = coords(6, 2);
        let r = reframe(&p, 6, 2, 16, 16, ResizeMode::Pad);
        assert_eq!((r.width, r.height), (6, 6));
        assert_eq!((px(&r, 0, 0), px(&r, 5, 5)), ([0; 3], [0; 3]));
        assert_eq!((px(&r, 0, 2), px(&r, 5, 3)), ([0, 0, 7], [5, 1, 7]));
        // 2x3 to 4:3 (wider): 4x3, the picture on columns 1..3.
        let p = coords(2, 3);
        let r = reframe(&p, 2, 3, 64, 48, ResizeMode::Pad);
        assert_eq!((r.width, r.height), (4, 3));
        assert_eq!((px(&r, 0, 0), px(&r, 1, 0), px(&r, 2, 2), px(&r, 3, 2)), ([0; 3], [0, 0, 7], [1, 2, 7], [0; 3]));
    }

    #[test]
    fn names_round_trip() {
        for m in [ResizeMode::Stretch, ResizeMode::Crop, ResizeMode::Pad] {
            assert_eq!(ResizeMode::parse(m.as_str()), Some(m));
        }
        assert_eq!(ResizeMode::parse("fit"), None);
    }
}
