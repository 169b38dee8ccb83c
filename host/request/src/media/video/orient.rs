//! Turning decoded frames upright. Phones record portrait as a landscape picture plus a display
//! matrix in the track header (MP4/MOV `tkhd`) that a player applies; a model must see what the
//! player shows, so frames are turned here. Right angles and mirrors only: other matrices (a
//! skew, a 30° turn) are not what cameras write and are ignored.

/// A right-angle turn and/or mirror: display `(x', y') = (a·x + c·y, b·x + d·y)`, shifted back
/// into the picture, with `a..d` in {-1, 0, 1} (the display matrix's upper 2×2, y pointing down).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Orientation {
    a: i8,
    b: i8,
    c: i8,
    d: i8,
}

impl Orientation {
    /// Frames as stored.
    pub const UPRIGHT: Orientation = Orientation { a: 1, b: 0, c: 0, d: 1 };

    /// From a display matrix as ffmpeg exports it: nine `i32`s row by row, `[a b u; c d v; x y w]`,
    /// `a..d` in 16.16 fixed point. `None` for anything but a right angle or a mirror.
    pub fn from_matrix(m: &[i32; 9]) -> Option<Orientation> {
        let (a, b, c, d) = (m[0] as i64, m[1] as i64, m[3] as i64, m[4] as i64);
        let scale = a.abs().max(b.abs()).max(c.abs()).max(d.abs());
        if scale == 0 {
            return None;
        }
        // Each entry to -1, 0 or 1 relative to the largest (a uniform scale is no turn).
        let unit = |v: i64| if v.abs() * 2 < scale { 0 } else { v.signum() as i8 };
        let o = Orientation { a: unit(a), b: unit(b), c: unit(c), d: unit(d) };
        let axis_aligned = (o.a != 0) != (o.b != 0) && (o.c != 0) != (o.d != 0) && (o.a != 0) == (o.d != 0);
        // A 45° entry rounds to 1 beside another 1: not a right angle.
        let exact = |v: i64| v == 0 || v.abs() == scale;
        (axis_aligned && [a, b, c, d].into_iter().all(exact)).then_some(o)
    }

    /// From a `rotate` tag (degrees clockwise, what older muxers wrote instead of a matrix).
    #[cfg_attr(not(feature = "ffmpeg"), allow(dead_code))]
    pub fn from_rotate_tag(tag: &str) -> Option<Orientation> {
        let degrees: i64 = tag.trim().parse().ok()?;
        match degrees.rem_euclid(360) {
            0 => Some(Orientation::UPRIGHT),
            90 => Some(Orientation { a: 0, b: 1, c: -1, d: 0 }),
            180 => Some(Orientation { a: -1, b: 0, c: 0, d: -1 }),
            270 => Some(Orientation { a: 0, b: -1, c: 1, d: 0 }),
            _ => None,
        }
    }

    /// Width and height of a `width`×`height` frame once turned.
    pub fn size(self, width: u32, height: u32) -> (u32, u32) {
        if self.a != 0 {
            (width, height)
        } else {
            (height, width)
        }
    }

    /// `rgb` (RGB8, `width`×`height`) turned, into `out` (cleared first).
    pub fn apply(self, rgb: &[u8], width: u32, height: u32, out: &mut Vec<u8>) {
        let (w, h) = (width as i64, height as i64);
        let (ow, oh) = self.size(width, height);
        out.clear();
        out.resize(rgb.len(), 0);
        if self == Orientation::UPRIGHT {
            out.copy_from_slice(rgb);
            return;
        }
        let (a, b, c, d) = (self.a as i64, self.b as i64, self.c as i64, self.d as i64);
        // The shift that brings the turned corners back to (0, 0).
        let x0 = -((a * (w - 1)).min(0) + (c * (h - 1)).min(0));
        let y0 = -((b * (w - 1)).min(0) + (d * (h - 1)).min(0));
        debug_assert!(ow as i64 > 0 && oh as i64 > 0);
        for y in 0..h {
            let row = &rgb[(y * w * 3) as usize..((y + 1) * w * 3) as usize];
            for (x, px) in row.chunks_exact(3).enumerate() {
                let x = x as i64;
                let (tx, ty) = (a * x + c * y + x0, b * x + d * y + y0);
                let at = ((ty * ow as i64 + tx) * 3) as usize;
                out[at..at + 3].copy_from_slice(px);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 3×2 picture whose pixels are numbered 0..6 row by row (each pixel's R).
    fn numbered() -> Vec<u8> {
        (0..6u8).flat_map(|i| [i, 0, 0]).collect()
    }

    fn turned(o: Orientation) -> ((u32, u32), Vec<u8>) {
        let mut out = Vec::new();
        o.apply(&numbered(), 3, 2, &mut out);
        (o.size(3, 2), out.chunks(3).map(|p| p[0]).collect())
    }

    const ONE: i32 = 1 << 16;

    #[test]
    fn a_phone_portrait_matrix_turns_clockwise() {
        // What an iPhone held upright writes: [0 1 0; -1 0 0; h 0 1].
        let o = Orientation::from_matrix(&[0, ONE, 0, -ONE, 0, 0, 1080 * ONE, 0, 1 << 30]).unwrap();
        assert_eq!(o, Orientation::from_rotate_tag("90").unwrap());
        // 0 1 2 / 3 4 5 turned clockwise: 3 0 / 4 1 / 5 2.
        assert_eq!(turned(o), ((2, 3), vec![3, 0, 4, 1, 5, 2]));
    }

    #[test]
    fn the_other_right_angles_and_mirrors() {
        let m = |a: i32, b: i32, c: i32, d: i32| Orientation::from_matrix(&[a, b, 0, c, d, 0, 0, 0, 1 << 30]).unwrap();
        assert_eq!(turned(m(0, -ONE, ONE, 0)), ((2, 3), vec![2, 5, 1, 4, 0, 3]));
        assert_eq!(m(0, -ONE, ONE, 0), Orientation::from_rotate_tag("-90").unwrap());
        assert_eq!(turned(m(-ONE, 0, 0, -ONE)), ((3, 2), vec![5, 4, 3, 2, 1, 0]));
        assert_eq!(turned(m(-ONE, 0, 0, ONE)), ((3, 2), vec![2, 1, 0, 5, 4, 3]));
        assert_eq!(turned(m(ONE, 0, 0, ONE)), ((3, 2), numbered().chunks(3).map(|p| p[0]).collect()));
        // A uniform scale is no turn.
        assert_eq!(m(2 * ONE, 0, 0, 2 * ONE), Orientation::UPRIGHT);
    }

    #[test]
    fn other_matrices_are_ignored() {
        let r45 = (ONE as f64 / 2f64.sqrt()) as i32;
        assert_eq!(Orientation::from_matrix(&[r45, r45, 0, -r45, r45, 0, 0, 0, 1 << 30]), None);
        assert_eq!(Orientation::from_matrix(&[0; 9]), None);
        assert_eq!(Orientation::from_matrix(&[ONE, ONE, 0, 0, ONE, 0, 0, 0, 1 << 30]), None);
        assert_eq!(Orientation::from_rotate_tag("45"), None);
        assert_eq!(Orientation::from_rotate_tag("up"), None);
    }
}
