//! ggml's block formats to `f32`, as `ggml-quants.c` (`dequantize_row_*`) and gguf-py's
//! `quants.py` define them. Block scales are f16; the products are formed in f32 (gguf-py
//! computes in f32 too, which is the reference the fixtures use; diffusers' GGUF path computes
//! in the model's dtype).

use anyhow::{ensure, Result};
use half::{bf16, f16};

use crate::types::GgmlType;

fn h(b: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

/// `bytes` (whole blocks of `ty`) to `out.len()` values.
pub fn dequantize(ty: GgmlType, bytes: &[u8], out: &mut [f32]) -> Result<()> {
    let want = ty.bytes_for(out.len() as u64);
    ensure!(want == Some(bytes.len() as u64), "{} {ty} values need {want:?} bytes, got {}", out.len(), bytes.len());
    let blocks = bytes.chunks_exact(ty.block_bytes()).zip(out.chunks_exact_mut(ty.block_len()));
    match ty {
        GgmlType::F32 => {
            for (b, y) in blocks {
                y[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        GgmlType::F16 => blocks.for_each(|(b, y)| y[0] = h(b, 0)),
        GgmlType::BF16 => blocks.for_each(|(b, y)| y[0] = bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()),
        GgmlType::Q8_0 => {
            for (b, y) in blocks {
                let d = h(b, 0);
                for (y, &q) in y.iter_mut().zip(&b[2..34]) {
                    *y = d * f32::from(q as i8);
                }
            }
        }
        GgmlType::Q4_0 | GgmlType::Q4_1 => {
            let with_min = ty == GgmlType::Q4_1;
            for (b, y) in blocks {
                let d = h(b, 0);
                // As ggml: `(q - 8) · d`, or `q · d + m` with a min.
                let (m, off, qs) = if with_min { (h(b, 2), 0.0, &b[4..20]) } else { (0.0, 8.0, &b[2..18]) };
                for (j, &q) in qs.iter().enumerate() {
                    y[j] = d * (f32::from(q & 0xf) - off) + m;
                    y[j + 16] = d * (f32::from(q >> 4) - off) + m;
                }
            }
        }
        GgmlType::Q5_0 | GgmlType::Q5_1 => {
            let with_min = ty == GgmlType::Q5_1;
            for (b, y) in blocks {
                let d = h(b, 0);
                let (m, off, rest) = if with_min { (h(b, 2), 0.0, &b[4..]) } else { (0.0, 16.0, &b[2..]) };
                let qh = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
                for (j, &q) in rest[4..20].iter().enumerate() {
                    let lo = (q & 0xf) as u32 | (((qh >> j) & 1) << 4);
                    let hi = (q >> 4) as u32 | (((qh >> (j + 16)) & 1) << 4);
                    y[j] = d * (lo as f32 - off) + m;
                    y[j + 16] = d * (hi as f32 - off) + m;
                }
            }
        }
        GgmlType::Q4_K | GgmlType::Q5_K => {
            let five = ty == GgmlType::Q5_K;
            for (b, y) in blocks {
                let (d, dmin) = (h(b, 0), h(b, 2));
                let scales = &b[4..16];
                let (qh, qs) = if five { (&b[16..48], &b[48..176]) } else { (&[][..], &b[16..144]) };
                for j in 0..4 {
                    let (s1, m1) = scale_min_k4(2 * j, scales);
                    let (s2, m2) = scale_min_k4(2 * j + 1, scales);
                    let (d1, m1, d2, m2) = (d * s1, dmin * m1, d * s2, dmin * m2);
                    let q = &qs[32 * j..32 * j + 32];
                    for l in 0..32 {
                        let (mut lo, mut hi) = ((q[l] & 0xf) as u32, (q[l] >> 4) as u32);
                        if five {
                            lo |= ((qh[l] >> (2 * j)) as u32 & 1) << 4;
                            hi |= ((qh[l] >> (2 * j + 1)) as u32 & 1) << 4;
                        }
                        y[64 * j + l] = d1 * lo as f32 - m1;
                        y[64 * j + 32 + l] = d2 * hi as f32 - m2;
                    }
                }
            }
        }
        GgmlType::Q6_K => {
            for (b, y) in blocks {
                let (ql, qh, sc) = (&b[..128], &b[128..192], &b[192..208]);
                let d = h(b, 208);
                for n in 0..2 {
                    let (ql, qh, sc, y) = (&ql[64 * n..], &qh[32 * n..], &sc[8 * n..], &mut y[128 * n..]);
                    for l in 0..32 {
                        let is = l / 16;
                        let q1 = ((ql[l] & 0xf) | ((qh[l] & 3) << 4)) as i32 - 32;
                        let q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                        let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                        let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                        let s = |i: usize| d * f32::from(sc[i] as i8);
                        y[l] = s(is) * q1 as f32;
                        y[l + 32] = s(is + 2) * q2 as f32;
                        y[l + 64] = s(is + 4) * q3 as f32;
                        y[l + 96] = s(is + 6) * q4 as f32;
                    }
                }
            }
        }
    }
    Ok(())
}

/// The 6-bit scale and min of sub-block `j` (0..8) of a Q4_K/Q5_K block's 12 scale bytes.
fn scale_min_k4(j: usize, q: &[u8]) -> (f32, f32) {
    let (s, m) = if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    };
    (f32::from(s), f32::from(m))
}

/// The index of the first block of `bytes` whose f16 scale (or min) is NaN or infinite, which
/// would turn every value of the block into NaN: a damaged file, refused before it reaches a
/// device. Plain float types are not checked (a NaN weight there is the file's own value).
pub fn first_bad_scale(ty: GgmlType, bytes: &[u8]) -> Option<usize> {
    let scale_at = ty.scale_offsets();
    if scale_at.is_empty() {
        return None;
    }
    bytes.chunks_exact(ty.block_bytes()).position(|b| scale_at.iter().any(|&at| !h(b, at).is_finite()))
}
