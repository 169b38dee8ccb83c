//! PIL's bicubic and bilinear resizes of 8-bit RGB, as `CLIPImageProcessorPil` (bicubic) and
//! diffusers' `VaeImageProcessor(resample="bilinear")` run them (`Image.resize`, no reducing
//! gap). Written from Pillow's `Resample.c` algorithm: per output pixel, a
//! = −0.5 cubic weights over a support of 2 input pixels (widened by the scale when shrinking),
//! normalised, then rounded to fixed point with 22 fractional bits; the horizontal pass runs
//! first and each pass rounds to 8 bits. Integer arithmetic throughout, so the result is PIL's
//! to the bit, which a float resampler is not.

/// Fractional bits of the fixed-point weights (`32 − 8 − 2`: headroom for 8-bit inputs).
pub const PRECISION_BITS: u32 = 22;

/// The bicubic kernel with a = −0.5.
fn bicubic(x: f64) -> f64 {
    const A: f64 = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        (((x - 5.0) * x + 8.0) * x - 4.0) * A
    } else {
        0.0
    }
}

/// PIL's bilinear (triangle) kernel.
fn bilinear(x: f64) -> f64 {
    let x = x.abs();
    if x < 1.0 {
        1.0 - x
    } else {
        0.0
    }
}

/// PIL's Lanczos kernel: the sinc truncated at 3 by a 3-wide sinc window.
fn lanczos(x: f64) -> f64 {
    let sinc = |x: f64| {
        if x == 0.0 {
            1.0
        } else {
            let x = x * std::f64::consts::PI;
            x.sin() / x
        }
    };
    if (-3.0..3.0).contains(&x) {
        sinc(x) * sinc(x / 3.0)
    } else {
        0.0
    }
}

/// A PIL resampling filter: its kernel and support (in input samples at scale 1).
#[derive(Clone, Copy, Debug)]
pub enum Filter {
    /// `Image.BICUBIC`.
    Bicubic,
    /// `Image.BILINEAR`.
    Bilinear,
    /// `Image.LANCZOS`.
    Lanczos,
}

impl Filter {
    fn kernel(self) -> (fn(f64) -> f64, f64) {
        match self {
            Filter::Bicubic => (bicubic, 2.0),
            Filter::Bilinear => (bilinear, 1.0),
            Filter::Lanczos => (lanczos, 3.0),
        }
    }
}

/// For each output sample, the first input sample it reads and its fixed-point bicubic weights
/// (public so the tests can check they sum to one in fixed point).
pub fn coefficients(input: usize, output: usize) -> Vec<(usize, Vec<i32>)> {
    coefficients_for(Filter::Bicubic, input, output)
}

/// [`coefficients`] of `filter`.
pub fn coefficients_for(filter: Filter, input: usize, output: usize) -> Vec<(usize, Vec<i32>)> {
    let (kernel, base_support) = filter.kernel();
    let scale = input as f64 / output as f64;
    let filter_scale = scale.max(1.0);
    let support = base_support * filter_scale;
    (0..output)
        .map(|o| {
            let center = (o as f64 + 0.5) * scale;
            // C's float-to-int conversion truncates toward zero; the clamps follow.
            let lo = ((center - support + 0.5) as i64).max(0) as usize;
            let hi = ((center + support + 0.5) as i64).min(input as i64).max(lo as i64) as usize;
            let w: Vec<f64> = (lo..hi).map(|i| kernel((i as f64 - center + 0.5) * (1.0 / filter_scale))).collect();
            let total: f64 = w.iter().sum();
            let one = (1u32 << PRECISION_BITS) as f64;
            let fixed = w
                .iter()
                .map(|&k| {
                    let k = if total != 0.0 { k / total } else { k };
                    // Rounded half away from zero, as Pillow's normalize_coeffs_8bpc does.
                    if k < 0.0 {
                        (-0.5 + k * one) as i32
                    } else {
                        (0.5 + k * one) as i32
                    }
                })
                .collect();
            (lo, fixed)
        })
        .collect()
}

/// A fixed-point sum back to 8 bits, clamped.
fn clip8(acc: i64) -> u8 {
    (acc >> PRECISION_BITS).clamp(0, 255) as u8
}

/// Resamples RGB8 `src` along one axis: `lines` lines, each `line_stride` bytes after the last,
/// its samples `step` bytes apart; output sample `o` of line `l` goes to `out[out_index(l, o)..]`.
/// Rows are lines for the horizontal pass, columns for the vertical one.
fn pass(
    src: &[u8],
    (lines, line_stride): (usize, usize),
    step: usize,
    coeffs: &[(usize, Vec<i32>)],
    out_index: impl Fn(usize, usize) -> usize,
    out: &mut [u8],
) {
    for line in 0..lines {
        for (o, (lo, k)) in coeffs.iter().enumerate() {
            let mut acc = [1i64 << (PRECISION_BITS - 1); 3];
            for (j, &w) in k.iter().enumerate() {
                let at = line * line_stride + (lo + j) * step;
                for (c, a) in acc.iter_mut().enumerate() {
                    *a += src[at + c] as i64 * w as i64;
                }
            }
            let dst = out_index(line, o);
            for c in 0..3 {
                out[dst + c] = clip8(acc[c]);
            }
        }
    }
}

/// `rgb` (`w`x`h`, row-major RGB8) resized to `nw`x`nh` as PIL's `Image.resize(BICUBIC)` does:
/// the same size is returned as it is, an axis whose size is kept is not resampled.
pub fn resize_bicubic(rgb: &[u8], w: usize, h: usize, nw: usize, nh: usize) -> Vec<u8> {
    resize(Filter::Bicubic, rgb, w, h, nw, nh)
}

/// [`resize_bicubic`] with `filter`.
pub fn resize(filter: Filter, rgb: &[u8], w: usize, h: usize, nw: usize, nh: usize) -> Vec<u8> {
    let mut cur = rgb.to_vec();
    if nw != w {
        let mut out = vec![0u8; nw * h * 3];
        pass(&cur, (h, w * 3), 3, &coefficients_for(filter, w, nw), |y, x| (y * nw + x) * 3, &mut out);
        cur = out;
    }
    if nh != h {
        let mut out = vec![0u8; nw * nh * 3];
        // Lines are columns now: a column's samples are a row apart.
        pass(&cur, (nw, 3), nw * 3, &coefficients_for(filter, h, nh), |x, y| (y * nw + x) * 3, &mut out);
        cur = out;
    }
    cur
}
