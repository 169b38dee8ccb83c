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

/// The most pixels a fitted picture may have. Padding makes a picture larger than it came, so the
/// bound on decoded pictures holds after fitting too: that is what the model then resamples.
pub const MAX_FITTED_PIXELS: u64 = super::MAX_IMAGE_PIXELS;

/// The longest side a fitted picture may have. Resampling to the output size builds a filter
/// table per axis, the side times the output's side: a 50-megapixel picture one pixel high must
/// not get that far.
pub const MAX_FITTED_SIDE: u64 = 16_384;

/// How many times its short side a fitted picture's long side may be. An image encoder's
/// processor scales the short side to its input (CLIP: 224) and the long side with it. Wider
/// than any output's aspect (4096x16 is 256:1), so `crop` and `pad` always fit.
pub const MAX_FITTED_ASPECT: u64 = 512;

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

/// The size [`reframe`] brings a `width`x`height` picture to for a `out_w`x`out_h` output, in
/// u64: padding an extreme aspect can leave u32 far behind, and the caller must see that to
/// refuse it rather than wrap. Stretch, matching aspects and empty sizes keep the picture's.
pub fn fitted_size(width: u32, height: u32, out_w: u32, out_h: u32, mode: ResizeMode) -> (u64, u64) {
    let (w, h, ow, oh) = (width as u64, height as u64, out_w as u64, out_h as u64);
    // Compare aspects exactly: w/h vs ow/oh (each product of two u32 fits u64).
    let (wide, tall) = (w * oh, h * ow);
    if mode == ResizeMode::Stretch || wide == tall || w == 0 || h == 0 || ow == 0 || oh == 0 {
        return (w, h);
    }
    // n/d to the nearest, halves up, at least 1; in u128 because 2n can pass u64.
    let round = |n: u64, d: u64| ((2 * n as u128 + d as u128) / (2 * d as u128)).max(1) as u64;
    // The picture is wider than the output when wide > tall.
    match (mode, wide > tall) {
        (ResizeMode::Crop, true) => (round(h * ow, oh).min(w), h),
        (ResizeMode::Crop, false) => (w, round(w * oh, ow).min(h)),
        (ResizeMode::Pad, true) => (w, round(w * oh, ow).max(h)),
        (ResizeMode::Pad, false) => (round(h * ow, oh).max(w), h),
        (ResizeMode::Stretch, _) => (w, h),
    }
}

/// Checks, before any work, that a `width`x`height` picture (or video frame) fitted to
/// `out_w`x`out_h` as `mode` says stays within [`MAX_FITTED_PIXELS`], [`MAX_FITTED_SIDE`] and
/// [`MAX_FITTED_ASPECT`], so what an input makes the model do is bounded by the input's checks,
/// not by its shape. The fitted size, or why not, in words for a 400.
pub fn check_fit(width: u32, height: u32, out_w: u32, out_h: u32, mode: ResizeMode) -> Result<(u32, u32), String> {
    let (fw, fh) = fitted_size(width, height, out_w, out_h, mode);
    let what = if (fw, fh) == (width as u64, height as u64) {
        format!("the {width}x{height} picture")
    } else {
        format!("resize_mode `{}` makes the {width}x{height} picture {fw}x{fh}", mode.as_str())
    };
    let (long, short) = (fw.max(fh), fw.min(fh));
    let pixels = fw.saturating_mul(fh);
    let broken = if pixels == 0 {
        format!("{what}, which is empty")
    } else if pixels > MAX_FITTED_PIXELS {
        format!(
            "{what} ({:.1} megapixels), more than the {} accepted",
            pixels as f64 / 1e6,
            MAX_FITTED_PIXELS / 1_000_000
        )
    } else if long > MAX_FITTED_SIDE {
        format!("{what}, a side longer than the {MAX_FITTED_SIDE} pixels accepted")
    } else if long > short.saturating_mul(MAX_FITTED_ASPECT) {
        format!("{what}, its long side more than {MAX_FITTED_ASPECT} times its short side")
    } else {
        // Within the bounds above both sides fit u32.
        return Ok((fw as u32, fh as u32));
    };
    Err(format!(
        "{broken} (for the {out_w}x{out_h} output): send a picture nearer the output's shape or size, or another \
         resize_mode"
    ))
}

/// `rgb` (`width`x`height` RGB8) brought to the aspect of `out_w`x`out_h` as `mode` says; the
/// resize to the exact size is left to the model. Stretch, and any picture already of the
/// output's aspect, come back borrowed. Admission runs [`check_fit`] first; a fitted size past
/// what memory can index panics here, named, rather than wrapping.
pub fn reframe(rgb: &[u8], width: u32, height: u32, out_w: u32, out_h: u32, mode: ResizeMode) -> Reframed<'_> {
    let (fw, fh) = fitted_size(width, height, out_w, out_h, mode);
    if (fw, fh) == (width as u64, height as u64) {
        return Reframed { rgb: Cow::Borrowed(rgb), width, height };
    }
    let side = |v: u64| u32::try_from(v).expect("a fitted side past u32 (check_fit refuses it at admission)");
    let (w, h) = (side(fw), side(fh));
    let (width_b, w_b) = (width as usize * 3, w as usize * 3);
    let bytes = w_b.checked_mul(h as usize).expect("a fitted picture past usize (check_fit refuses it at admission)");
    let mut out;
    if mode == ResizeMode::Crop {
        // The crop is never larger than the picture (fitted_size's `min`).
        let (x0, y0) = ((width - w) as usize / 2, (height - h) as usize / 2);
        out = Vec::with_capacity(bytes);
        for row in rgb.chunks_exact(width_b).skip(y0).take(h as usize) {
            out.extend_from_slice(&row[x0 * 3..x0 * 3 + w_b]);
        }
    } else {
        // Padding: never smaller than the picture (fitted_size's `max`).
        let (x0, y0) = ((w - width) as usize / 2, (h - height) as usize / 2);
        out = vec![0u8; bytes];
        for (row, dst) in rgb.chunks_exact(width_b).zip(out.chunks_exact_mut(w_b).skip(y0)) {
            dst[x0 * 3..x0 * 3 + width_b].copy_from_slice(row);
        }
    }
    Reframed { rgb: Cow::Owned(out), width: w, height: h }
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
    fn fitted_sizes_are_exact_where_u32_would_wrap() {
        // Issue 54: 40000x1 padded to 832x480 is 40000x23077, 2.77e9 bytes of RGB8 (past u32).
        assert_eq!(fitted_size(40_000, 1, 832, 480, ResizeMode::Pad), (40_000, 23_077));
        // Past u32 on one side: kept in u64, never truncated.
        assert_eq!(fitted_size(u32::MAX, 1, 16, 4096, ResizeMode::Pad), (u32::MAX as u64, 1_099_511_627_520));
        assert_eq!(fitted_size(1, u32::MAX, 4096, 16, ResizeMode::Pad), (1_099_511_627_520, u32::MAX as u64));
        assert_eq!(fitted_size(u32::MAX, 1, 16, 4096, ResizeMode::Crop), (1, 1));
        assert_eq!(fitted_size(u32::MAX, u32::MAX, 16, 16, ResizeMode::Pad), (u32::MAX as u64, u32::MAX as u64));
        // Empty sizes are left as they are (nothing to divide by).
        for m in [ResizeMode::Stretch, ResizeMode::Crop, ResizeMode::Pad] {
            assert_eq!(fitted_size(0, 5, 16, 16, m), (0, 5));
            assert_eq!(fitted_size(5, 3, 0, 16, m), (5, 3));
        }
    }

    #[test]
    fn check_fit_bounds_pixels_sides_and_aspect_in_every_mode() {
        use ResizeMode::{Crop, Pad, Stretch};
        assert_eq!(check_fit(56, 40, 832, 480, Pad), Ok((69, 40)));
        assert_eq!(check_fit(40_000, 1, 832, 480, Crop), Ok((2, 1)));
        let e = check_fit(40_000, 1, 832, 480, Pad).unwrap_err();
        assert!(e.starts_with("resize_mode `pad` makes the 40000x1 picture 40000x23077 (923.1 megapixels)"), "{e}");
        let e = check_fit(u32::MAX, 1, 16, 4096, Pad).unwrap_err();
        assert!(e.contains("more than the 50 accepted"), "{e}");
        // Stretch keeps the picture; its own shape is what is bounded.
        assert!(check_fit(16_385, 100, 832, 480, Stretch).unwrap_err().contains("a side longer than the 16384"));
        assert!(check_fit(16_384, 100, 832, 480, Stretch).is_ok());
        assert!(check_fit(513, 1, 832, 480, Stretch).unwrap_err().contains("more than 512 times"));
        assert!(check_fit(512, 1, 832, 480, Stretch).is_ok());
        // The widest output (4096x16) crops and pads a square picture to its own aspect.
        assert_eq!(check_fit(1000, 1000, 4096, 16, Crop), Ok((1000, 4)));
        assert!(check_fit(4096, 4096, 4096, 16, Pad).unwrap_err().contains("megapixels"));
        // Padding to exactly the bound passes.
        assert_eq!(check_fit(10_000, 2_500, 2, 1, Pad), Ok((10_000, 5_000)));
        assert!(check_fit(10_002, 2_500, 2, 1, Pad).is_err());
        assert!(check_fit(0, 5, 16, 16, Crop).unwrap_err().contains("empty"));
    }

    #[test]
    fn names_round_trip() {
        for m in [ResizeMode::Stretch, ResizeMode::Crop, ResizeMode::Pad] {
            assert_eq!(ResizeMode::parse(m.as_str()), Some(m));
        }
        assert_eq!(ResizeMode::parse("fit"), None);
    }
}
