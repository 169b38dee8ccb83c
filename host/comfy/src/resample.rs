//! Picture resampling as ComfyUI's `comfy.utils.common_upscale` does it, so a workflow's
//! resize nodes give the pixels ComfyUI would: `nearest-exact`, `bilinear`, `bicubic` and `area`
//! are torch's `F.interpolate` (no antialiasing, `align_corners=False`), `lanczos` is PIL's
//! (antialiased, rounded to 8 bits after each pass). Each is separable: one horizontal and one
//! vertical pass of per-output-pixel weights.

use serde::Serialize;

/// An `upscale_method` of ComfyUI's resize nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// torch `nearest-exact`.
    NearestExact,
    /// torch `bilinear`.
    Bilinear,
    /// torch `bicubic` (a = −0.75).
    Bicubic,
    /// torch `area`: adaptive average pooling.
    Area,
    /// PIL's Lanczos (a = 3).
    Lanczos,
}

impl Method {
    /// The method ComfyUI calls `name`.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "nearest-exact" => Method::NearestExact,
            "bilinear" => Method::Bilinear,
            "bicubic" => Method::Bicubic,
            "area" => Method::Area,
            "lanczos" => Method::Lanczos,
            _ => return None,
        })
    }

    /// Every name [`parse`](Self::parse) takes, for messages.
    pub const NAMES: &'static str = "nearest-exact, bilinear, bicubic, area, lanczos";
}

/// Per output sample: (input index, weight) pairs.
type Taps = Vec<Vec<(usize, f32)>>;

fn lanczos(x: f64) -> f64 {
    let sinc = |x: f64| if x == 0.0 { 1.0 } else { (std::f64::consts::PI * x).sin() / (std::f64::consts::PI * x) };
    if x.abs() < 3.0 {
        sinc(x) * sinc(x / 3.0)
    } else {
        0.0
    }
}

/// torch's cubic convolution weights for the four taps around a sample at fraction `t`.
fn cubic(t: f64) -> [f64; 4] {
    let a = -0.75;
    let near = |x: f64| ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    let far = |x: f64| ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
    [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)]
}

fn taps(input: usize, output: usize, method: Method) -> Taps {
    let scale = input as f64 / output as f64;
    let last = input - 1;
    (0..output)
        .map(|o| match method {
            Method::NearestExact => vec![((((o as f64 + 0.5) * scale).floor() as usize).min(last), 1.0)],
            Method::Bilinear => {
                let src = ((o as f64 + 0.5) * scale - 0.5).max(0.0);
                let i0 = (src.floor() as usize).min(last);
                let l = (src - i0 as f64) as f32;
                vec![(i0, 1.0 - l), ((i0 + 1).min(last), l)]
            }
            Method::Bicubic => {
                let src = (o as f64 + 0.5) * scale - 0.5;
                let i = src.floor();
                let w = cubic(src - i);
                (0..4).map(|k| (((i as i64 - 1 + k as i64).clamp(0, last as i64)) as usize, w[k] as f32)).collect()
            }
            Method::Area => {
                let lo = o * input / output;
                let hi = ((o + 1) * input).div_ceil(output);
                let w = 1.0 / (hi - lo) as f32;
                (lo..hi).map(|i| (i, w)).collect()
            }
            Method::Lanczos => {
                let support = 3.0 * scale.max(1.0);
                let center = (o as f64 + 0.5) * scale;
                let lo = ((center - support + 0.5).floor().max(0.0)) as usize;
                let hi = ((center + support + 0.5).floor() as usize).min(input);
                let ws: Vec<f64> = (lo..hi).map(|i| lanczos((i as f64 - center + 0.5) / scale.max(1.0))).collect();
                let total: f64 = ws.iter().sum();
                (lo..hi).zip(ws).map(|(i, w)| (i, if total == 0.0 { 0.0 } else { (w / total) as f32 })).collect()
            }
        })
        .collect()
}

/// `[h][w][3]` bytes → `[h][taps.len()][3]` (reading the bytes directly, so a large picture is
/// never held as floats).
fn horizontal(src: &[u8], w: usize, h: usize, taps: &Taps) -> Vec<f32> {
    let ow = taps.len();
    let mut out = vec![0f32; h * ow * 3];
    for y in 0..h {
        for (x, t) in taps.iter().enumerate() {
            for c in 0..3 {
                out[(y * ow + x) * 3 + c] = t.iter().map(|&(i, k)| src[(y * w + i) * 3 + c] as f32 * k).sum();
            }
        }
    }
    out
}

/// `[h][w][3]` → `[taps.len()][w][3]`.
fn vertical(src: &[f32], w: usize, taps: &Taps) -> Vec<f32> {
    let mut out = vec![0f32; taps.len() * w * 3];
    for (y, t) in taps.iter().enumerate() {
        for x in 0..w {
            for c in 0..3 {
                out[(y * w + x) * 3 + c] = t.iter().map(|&(i, k)| src[(i * w + x) * 3 + c] * k).sum();
            }
        }
    }
    out
}

fn to_u8(v: f32) -> u8 {
    v.round().clamp(0.0, 255.0) as u8
}

/// `rgb` (RGB8, `w`×`h`, row-major) resampled to `width`×`height` with `method`.
pub fn resample(rgb: &[u8], (w, h): (u32, u32), (width, height): (u32, u32), method: Method) -> Vec<u8> {
    let (w, h, ow, oh) = (w as usize, h as usize, width as usize, height as usize);
    assert_eq!(rgb.len(), w * h * 3, "resample: {w}x{h} RGB8");
    if (w, h) == (ow, oh) {
        return rgb.to_vec();
    }
    let mut across = horizontal(rgb, w, h, &taps(w, ow, method));
    if method == Method::Lanczos {
        // PIL keeps 8-bit pixels between its passes.
        across.iter_mut().for_each(|v| *v = to_u8(*v) as f32);
    }
    vertical(&across, ow, &taps(h, oh, method)).into_iter().map(to_u8).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 4×2 picture: one channel ramps 0, 40, 80, 120 across, rows equal.
    fn ramp() -> Vec<u8> {
        (0..2).flat_map(|_| (0..4u8).flat_map(|x| [x * 40, 7, 200])).collect()
    }

    #[test]
    fn every_method_keeps_a_same_size_picture_and_a_flat_one() {
        let flat = vec![90u8; 5 * 3 * 3];
        for m in [Method::NearestExact, Method::Bilinear, Method::Bicubic, Method::Area, Method::Lanczos] {
            assert_eq!(resample(&ramp(), (4, 2), (4, 2), m), ramp(), "{m:?}");
            assert!(resample(&flat, (5, 3), (7, 2), m).iter().all(|&v| v == 90), "{m:?} keeps a flat picture flat");
        }
    }

    #[test]
    fn halving_matches_torch() {
        let r = |m| resample(&ramp(), (4, 2), (2, 1), m).chunks(3).map(|p| p[0]).collect::<Vec<_>>();
        // F.interpolate([0, 40, 80, 120], size=2): area averages pairs; bilinear samples
        // between them (align_corners=False) without antialiasing; nearest-exact picks 1 and 3.
        assert_eq!(r(Method::Area), [20, 100]);
        assert_eq!(r(Method::Bilinear), [20, 100]);
        assert_eq!(r(Method::NearestExact), [40, 120]);
        // Bicubic at the same positions (t = 0.5: weights −0.09375, 0.59375, 0.59375, −0.09375,
        // indices clamped at the border): 0.59375·40 − 0.09375·80 = 16.25 and 103.75.
        assert_eq!(r(Method::Bicubic), [16, 104]);
    }

    #[test]
    fn doubling_with_bilinear_interpolates_between_neighbours() {
        let up: Vec<u8> = resample(&ramp(), (4, 2), (8, 4), Method::Bilinear).chunks(3).take(8).map(|p| p[0]).collect();
        // Output x samples input x/2 − 0.25, clamped to the picture: 0, 10, 30, …, 110, then 120.
        assert_eq!(up, [0, 10, 30, 50, 70, 90, 110, 120]);
    }
}
